"""The Django integration, its WSGI handler under werkzeug and wsgiref and its ASGI handler under
uvicorn, both created before ``instrument()``: each request one invocation named by its method and
route, its view a traced child (a sync view under ASGI, run in a thread of ``sync_to_async``, with
the request as its exact parent), the status an attribute; an exception or a 5xx an error, a 404
none; the caller's sequence continued; a streamed body inside the request."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integrations import django_site, wsgi_servers
from tests.integrations.async_servers import Uvicorn
from tests.integrations.wsgi_servers import (
    TRACE_ID,
    TRACEPARENT,
    Server,
    capturing,
    children,
    one,
)

django_site.configure()

from django.core.handlers import asgi as django_asgi  # noqa: E402 (configured first)
from django.core.handlers import base as django_base  # noqa: E402
from django.core.handlers import exception as django_exception  # noqa: E402
from django.core.handlers import wsgi as django_wsgi  # noqa: E402

import tracer  # noqa: E402
from tracer._patching import integrations  # noqa: E402
from tracer._patching.integrations import asgi  # noqa: E402
from tracer._patching.integrations import django as django_integration  # noqa: E402
from tracer.testing import Capture  # noqa: E402

SITE = django_site.__name__ + "."
WSGI_APP = django_wsgi.WSGIHandler()  # before instrumenting, as a program does
ASGI_APP = django_asgi.ASGIHandler()
PATCHED = [
    (django_wsgi.WSGIHandler, "__call__"),
    (django_asgi.ASGIHandler, "__call__"),
    (django_base.BaseHandler, "resolve_request"),
    (django_exception, "response_for_exception"),
]
ORIGINALS = [vars(owner)[name] for owner, name in PATCHED]


def stored() -> list[Any]:
    return [vars(owner)[name] for owner, name in PATCHED]


@pytest.fixture(name="servers")
def _servers() -> Iterator[list[Any]]:
    yield from wsgi_servers.servers()


@pytest.fixture(name="trace")
def _trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[Capture]:
    yield from wsgi_servers.traced(monkeypatch)


@pytest.fixture(name="quiet")
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Django's log of the 500s and 404s the tests provoke, kept out of the output."""
    with caplog.at_level(logging.CRITICAL, logger="django"):
        yield


# Under ASGI, Django runs its sync parts (signals, middleware, a sync view) through asgiref's
# sync_to_async, in a ThreadPoolExecutor, each in a context asgiref copied itself: the thread
# patch leaves such a callable alone (``handoff.carries_context``), so no empty hop appears.


def serve(kind: str, servers: list[Any]) -> Any:
    server: Any = Uvicorn(ASGI_APP, lifespan="off") if kind == "asgi" else Server(WSGI_APP)
    servers.append(server)
    return server


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_a_request_is_named_by_its_route_and_its_view_is_a_traced_child(
    trace: Capture, servers: list[Any], kind: str
) -> None:
    server = serve(kind, servers)
    assert server.get("/price/apple") == (200, b"APPLE")
    request = one(trace, "django.GET /price/<str:item>")
    assert (request.status, request.parent) == ("ok", 0)
    assert request.attributes == {
        "http.request.method": "GET",
        "url.path": "/price/apple",
        "http.route": "/price/<str:item>",
        "http.response.status_code": 200,
    }
    view = one(trace, SITE + "price")
    assert view.parent == request.iid  # exact, from sync_to_async's thread too
    assert children(trace, view) == [SITE + "work"]
    if kind == "asgi":
        assert view.tid != request.tid  # a thread of sync_to_async


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_the_view_is_the_requests_only_child(trace: Capture, servers: list[Any], kind: str) -> None:
    """No node for the executor hops of asgiref's sync_to_async: they carry their own context.
    Under ASGI the request ends by joining the thread its sync parts ran in: a real wait, shown."""
    server = serve(kind, servers)
    assert server.get("/price/apple") == (200, b"APPLE")
    request = one(trace, "django.GET /price/<str:item>")
    join = "asgiref.sync.ThreadSensitiveContext.__aexit__.<locals>.join"
    assert children(trace, request) == [SITE + "price", *([join] if kind == "asgi" else [])]


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_every_kind_of_view_is_traced(trace: Capture, servers: list[Any], kind: str) -> None:
    server = serve(kind, servers)
    paths = (
        "/async/price/fig",
        "/things/mug",
        "/async/things/cup",
        "/legacy/tea",
        "/api/orders/7",
        "/traced",
    )
    for path in paths:
        assert server.get(path)[0] == 200
    views = {
        request.name: [name for name in children(trace, request) if name.startswith(SITE)]
        for request in trace.invocations()
        if request.parent == 0
    }
    assert views == {
        "django.GET /async/price/<str:item>": [SITE + "async_price"],
        "django.GET /things/<str:name>": [SITE + "Things"],
        "django.GET /async/things/<str:name>": [SITE + "AsyncThings"],
        "django.GET /legacy/(?P<item>\\w+)$": [SITE + "price"],
        "django.GET /api/orders/<int:number>": [SITE + "<lambda>"],
        "django.GET /traced": [SITE + "already_traced"],  # once
    }
    for view in ("async_price", "Things", "AsyncThings", "price", "<lambda>"):
        view_children = children(trace, one(trace, SITE + view))
        assert [name for name in view_children if name == SITE + "work"] == [SITE + "work"]


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_the_views_attributes_go_with_it(trace: Capture, servers: list[Any], kind: str) -> None:
    server = serve(kind, servers)
    status, body = wsgi_servers.post(server.url + "/post", b"hello")
    if kind == "asgi":
        server.done.served.get(timeout=30)
    else:
        server.wait()
    assert (status, body) == (200, b'{"posted": "HELLO"}')  # csrf_exempt: no 403
    assert one(trace, "django.POST /post").status == "ok"


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
@pytest.mark.usefixtures("quiet")
def test_an_exception_or_a_5xx_is_an_error_and_a_404_is_not(
    trace: Capture, servers: list[Any], kind: str
) -> None:
    server = serve(kind, servers)
    assert server.get("/boom")[0] == 500
    assert server.get("/unavailable")[0] == 503
    assert server.get("/missing")[0] == 404
    assert server.get("/nowhere")[0] == 404
    boom = one(trace, "django.GET /boom")
    assert (boom.status, boom.error) == ("error", "KeyError")
    assert boom.attributes is not None
    assert boom.attributes["http.response.status_code"] == 500
    view = one(trace, SITE + "boom")
    assert (view.parent, view.status, view.error) == (boom.iid, "error", "KeyError")
    unavailable = one(trace, "django.GET /unavailable")
    assert (unavailable.status, unavailable.error) == ("error", "HTTP 503")
    missing = one(trace, "django.GET /missing")
    assert (missing.status, missing.error) == ("ok", None)
    nowhere = one(trace, "django.GET /nowhere")  # no route: its path names it
    assert nowhere.status == "ok"
    assert nowhere.attributes == {
        "http.request.method": "GET",
        "url.path": "/nowhere",
        "http.response.status_code": 404,
    }


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_the_callers_sequence_is_continued(trace: Capture, servers: list[Any], kind: str) -> None:
    server = serve(kind, servers)
    server.get("/price/tea", {"traceparent": TRACEPARENT, "tracestate": "other=1"})
    assert one(trace, "django.GET /price/<str:item>").seq == TRACE_ID
    assert {i.seq for i in trace.invocations()} == {TRACE_ID}


@pytest.mark.parametrize(("kind", "path"), [("wsgi", "/stream"), ("asgi", "/async/stream")])
def test_a_streamed_body_is_inside_the_request(
    trace: Capture, servers: list[Any], kind: str, path: str
) -> None:
    server = serve(kind, servers)
    assert server.get(path) == (200, b"first SECOND")
    [request] = [i for i in trace.invocations() if i.parent == 0]
    second = one(trace, SITE + "work")
    assert second.parent == request.iid
    assert request.end_ns is not None
    assert second.end_ns is not None
    assert request.end_ns >= second.end_ns


def test_under_wsgiref_a_request_is_measured_once(trace: Capture, servers: list[Any]) -> None:
    servers.append(server := Server(WSGI_APP, "wsgiref"))  # type: ignore[arg-type]
    server.get("/price/fig")
    # the excluded request is no invocation (its view's own @traced call still records)
    requests = [i.name for i in trace.invocations() if i.name.startswith("django.")]
    assert requests == ["django.GET /price/<str:item>"]


def test_inside_the_asgi_middleware_a_request_is_measured_once(
    trace: Capture, servers: list[Any]
) -> None:
    middleware = asgi.InvoseqMiddleware(ASGI_APP)  # type: ignore[arg-type]
    servers.append(server := Uvicorn(middleware, lifespan="off"))
    server.get("/price/fig")
    request = one(trace, "django.GET /price/<str:item>")
    assert [i.name for i in trace.invocations() if i.parent == 0] == [request.name]
    assert one(trace, SITE + "price").parent == request.iid


def test_uninstrument_restores_django() -> None:
    tracer.instrument()
    assert all(now is not before for now, before in zip(stored(), ORIGINALS, strict=True))
    tracer.uninstrument()
    assert stored() == ORIGINALS


def test_switched_off_by_name_django_is_not_measured(
    monkeypatch: pytest.MonkeyPatch, servers: list[Any]
) -> None:
    with capturing(monkeypatch, "django") as trace:
        assert stored() == ORIGINALS
        server = serve("wsgi", servers)
        assert server.get("/price/lime") == (200, b"LIME")
        # the server's measure remains (the wsgi integration), named by the path alone
        assert [i.name for i in trace.invocations()] == ["wsgi.GET /price/lime", SITE + "work"]


def test_a_hook_that_fails_skips_that_part_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, servers: list[Any]
) -> None:
    def broken(module: Any) -> Any:
        raise AttributeError("Django 9 moved WSGIHandler")

    monkeypatch.setitem(django_integration.HOOKS, "django.core.handlers.wsgi", broken)
    monkeypatch.setattr(integrations, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="tracer"), capturing(monkeypatch) as trace:
        server = serve("wsgi", servers)
        assert server.get("/price/plum") == (200, b"PLUM")
        assert server.get("/price/pear") == (200, b"PEAR")
        # the server measures; Django's other hooks (the resolver, the views) still name it
        assert {i.name for i in trace.invocations()} == {
            "django.GET /price/<str:item>",
            SITE + "price",
            SITE + "work",
        }
    warnings = [r.getMessage() for r in caplog.records if "integration django" in r.getMessage()]
    assert warnings == [
        "invoseq: integration django skipped for django.core.handlers.wsgi: "
        "AttributeError('Django 9 moved WSGIHandler')"
    ]


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_an_excluded_url_is_no_invocation_and_listed_headers_are_recorded(
    monkeypatch: pytest.MonkeyPatch, servers: list[Any], kind: str
) -> None:
    """``OTEL_PYTHON_DJANGO_EXCLUDED_URLS`` and the header allow-lists, under WSGI and ASGI."""
    monkeypatch.setenv("OTEL_PYTHON_DJANGO_EXCLUDED_URLS", "/things/")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST", "x-tenant")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_RESPONSE", "Content-Type")
    with wsgi_servers.capturing(monkeypatch) as trace:
        server = serve(kind, servers)
        assert server.get("/things/pear")[0] == 200
        assert server.get("/price/apple", {"X-Tenant": "acme"}) == (200, b"APPLE")
    # the excluded request is no invocation (its view's own @traced call still records)
    requests = [i.name for i in trace.invocations() if i.name.startswith("django.")]
    assert requests == ["django.GET /price/<str:item>"]
    request = one(trace, "django.GET /price/<str:item>")
    assert request.attributes["http.request.header.x-tenant"] == "acme"
    assert request.attributes["http.response.header.content-type"].startswith("text/html")

"""The Flask integration, with an application created before ``instrument()`` (``from flask import
Flask`` first) and served by real servers: each request one invocation named by its method and
rule, its view a traced child however it was registered, the status an attribute; an exception or
a 5xx an error; the caller's sequence continued; a streamed body inside the request; one
invocation under a WSGI server the ``wsgi`` integration measures too."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Blueprint, Flask, Response, abort, stream_with_context
from flask.views import MethodView

import tracer
from tests.integrations import wsgi_servers
from tests.integrations.wsgi_servers import (
    TRACE_ID,
    TRACEPARENT,
    Server,
    capturing,
    children,
    named,
    one,
)
from tracer import traced
from tracer._core import measured
from tracer._patching import integrations
from tracer._patching.integrations import flask as flask_integration
from tracer._patching.integrations import wsgi
from tracer.testing import Capture

MODULE = __name__ + "."
ORIGINALS = {name: Flask.__dict__[name] for name in flask_integration.PATCHED}


@traced
def work(text: str) -> str:
    return text.upper()


def make_app() -> Flask:
    app = Flask("shop")

    @app.get("/price/<item>")
    def price(item: str) -> str:
        return work(item)

    @app.get("/boom")
    def boom() -> str:
        raise KeyError("boom")

    @app.get("/status/<int:code>")
    def status(code: int) -> str:
        abort(code)

    @app.get("/stream")
    def stream() -> Response:
        def body() -> Iterator[str]:
            yield "first "
            yield work("second")

        return Response(stream_with_context(body()))

    @app.get("/traced")
    @traced
    def already_traced() -> str:
        return "traced"

    @app.before_request
    def before() -> None:
        work("before")

    @app.get("/async")
    async def asynchronous() -> str:
        return work("async")

    orders = Blueprint("orders", __name__, url_prefix="/orders")

    @orders.get("/<int:number>")
    def order(number: int) -> str:
        return work(str(number))

    app.register_blueprint(orders)
    app.add_url_rule("/things/<name>", view_func=Things.as_view("things"))
    app.add_url_rule("/added", "added", added)
    return app


class Things(MethodView):
    def get(self, name: str) -> str:
        return work(name)


def added() -> str:
    return "added"


APP = make_app()  # before instrumenting, as a program does


@pytest.fixture(name="servers")
def _servers() -> Iterator[list[Server]]:
    yield from wsgi_servers.servers()


@pytest.fixture(name="trace")
def _trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[Capture]:
    yield from wsgi_servers.traced(monkeypatch)


def test_a_request_is_named_by_its_rule_and_its_view_is_a_traced_child(
    trace: Capture, servers: list[Server]
) -> None:
    servers.append(server := Server(APP))
    assert server.get("/price/apple") == (200, b"APPLE")
    request = one(trace, "flask.GET /price/<item>")
    assert (request.status, request.parent) == ("ok", 0)
    assert request.attributes == {
        "http.request.method": "GET",
        "url.path": "/price/apple",
        "http.route": "/price/<item>",
        "http.response.status_code": 200,
    }
    assert trace.trees(strip=MODULE) == [
        {
            "name": "flask.GET /price/<item>",
            "children": [
                {"name": "work"},  # before_request, inside the named request
                {"name": "make_app.<locals>.price", "children": [{"name": "work"}]},
            ],
        }
    ]


def test_every_way_of_registering_a_view_is_traced(trace: Capture, servers: list[Server]) -> None:
    late = Blueprint("late", __name__)
    late.add_url_rule("/late", "late", added)
    app = make_app()
    app.register_blueprint(late)  # registered after instrumenting
    servers.append(server := Server(app))
    for path in ("/orders/7", "/things/mug", "/added", "/late", "/traced", "/async"):
        assert server.get(path)[0] == 200
    views = {
        request.name: [name for name in children(trace, request) if name != MODULE + "work"]
        for request in trace.invocations()
        if request.parent == 0
    }
    assert views == {
        "flask.GET /orders/<int:number>": [MODULE + "make_app.<locals>.order"],
        "flask.GET /things/<name>": [MODULE + "Things"],
        "flask.GET /added": [MODULE + "added"],
        "flask.GET /late": [MODULE + "added"],
        "flask.GET /traced": [MODULE + "make_app.<locals>.already_traced"],  # once
        "flask.GET /async": [MODULE + "make_app.<locals>.asynchronous"],
    }
    # The coroutine runs on asgiref's loop in a thread (the hand-off is one more child), in a
    # copy of the view's context: the view is the exact parent of what it calls.
    asynchronous = one(trace, MODULE + "make_app.<locals>.asynchronous")
    assert MODULE + "work" in children(trace, asynchronous)


def test_an_exception_or_a_5xx_is_an_error_and_a_404_is_not(
    trace: Capture, servers: list[Server], caplog: pytest.LogCaptureFixture
) -> None:
    servers.append(server := Server(APP))
    with caplog.at_level(logging.CRITICAL, logger="shop"):
        assert server.get("/boom")[0] == 500
    assert server.get("/status/503")[0] == 503
    assert server.get("/status/404")[0] == 404
    assert server.get("/nowhere")[0] == 404
    boom = one(trace, "flask.GET /boom")
    assert (boom.status, boom.error) == ("error", "KeyError")
    assert boom.attributes is not None
    assert boom.attributes["http.response.status_code"] == 500
    view = one(trace, MODULE + "make_app.<locals>.boom")
    assert (view.parent, view.status, view.error) == (boom.iid, "error", "KeyError")
    unavailable, missing = named(trace, "flask.GET /status/<int:code>")
    assert (unavailable.status, unavailable.error) == ("error", "HTTP 503")
    assert (missing.status, missing.error) == ("ok", None)
    nowhere = one(trace, "flask.GET /nowhere")  # no route: its path names it
    assert nowhere.status == "ok"
    assert nowhere.attributes == {
        "http.request.method": "GET",
        "url.path": "/nowhere",
        "http.response.status_code": 404,
    }


def test_an_exception_flask_propagates_is_an_error(trace: Capture, servers: list[Server]) -> None:
    app = make_app()
    app.testing = True  # PROPAGATE_EXCEPTIONS: out of wsgi_app, to the server
    servers.append(server := Server(app))
    assert server.get("/boom")[0] == 500
    request = one(trace, "flask.GET /boom")
    assert (request.status, request.error) == ("error", "KeyError")


def test_the_callers_sequence_is_continued(trace: Capture, servers: list[Server]) -> None:
    servers.append(server := Server(APP))
    server.get("/price/tea", {"traceparent": TRACEPARENT})
    request = one(trace, "flask.GET /price/<item>")
    assert request.seq == TRACE_ID
    assert {i.seq for i in trace.invocations()} == {TRACE_ID}


def test_a_streamed_body_is_inside_the_request(trace: Capture, servers: list[Server]) -> None:
    servers.append(server := Server(APP))
    assert server.get("/stream") == (200, b"first SECOND")
    request = one(trace, "flask.GET /stream")
    second = named(trace, MODULE + "work")[-1]
    assert second.parent == request.iid
    assert request.end_ns is not None
    assert second.end_ns is not None
    assert request.end_ns >= second.end_ns


@pytest.mark.parametrize("outer", ["wsgiref", "middleware"])
def test_under_another_wsgi_layer_a_request_is_measured_once(
    trace: Capture, servers: list[Server], outer: str
) -> None:
    app = make_app()
    if outer == "middleware":
        app.wsgi_app = wsgi.InvoseqMiddleware(app.wsgi_app)  # type: ignore[method-assign]
        servers.append(server := Server(app))
    else:
        servers.append(server := Server(app, "wsgiref"))  # the wsgi integration's
    server.get("/price/fig")
    assert [i.name for i in trace.invocations() if i.parent == 0] == ["flask.GET /price/<item>"]


def test_a_middleware_put_on_wsgi_app_before_instrumenting_counts_in_the_request(
    monkeypatch: pytest.MonkeyPatch, servers: list[Server]
) -> None:
    app = make_app()
    inner = app.wsgi_app

    def middleware(environ: dict[str, Any], start_response: Any) -> Any:
        work("middleware")
        return inner(environ, start_response)

    app.wsgi_app = middleware  # type: ignore[method-assign]
    with capturing(monkeypatch) as trace:
        servers.append(server := Server(app))
        server.get("/added")
        request = one(trace, "flask.GET /added")
        assert children(trace, request) == [MODULE + "work", MODULE + "work", MODULE + "added"]


def test_uninstrument_restores_flask(servers: list[Server]) -> None:
    tracer.instrument()
    assert all(Flask.__dict__[name] is not ORIGINALS[name] for name in ORIGINALS)
    tracer.uninstrument()
    assert {name: Flask.__dict__[name] for name in ORIGINALS} == ORIGINALS
    servers.append(server := Server(APP))
    assert server.get("/price/kiwi") == (200, b"KIWI")


def test_switched_off_by_name_flask_is_not_measured(
    monkeypatch: pytest.MonkeyPatch, servers: list[Server]
) -> None:
    with capturing(monkeypatch, "flask") as trace:
        assert {name: Flask.__dict__[name] for name in ORIGINALS} == ORIGINALS
        servers.append(server := Server(APP))
        assert server.get("/price/lime") == (200, b"LIME")
        # the server's measure remains (the wsgi integration), named by the path alone
        names = [i.name for i in trace.invocations()]
        assert names == ["wsgi.GET /price/lime", MODULE + "work", MODULE + "work"]


def test_a_hook_that_fails_skips_flask_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, servers: list[Server]
) -> None:
    def broken(module: Any) -> Any:
        raise AttributeError("Flask 9 moved wsgi_app")

    monkeypatch.setitem(flask_integration.HOOKS, "flask.app", broken)
    monkeypatch.setattr(integrations, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="tracer"), capturing(monkeypatch) as trace:
        servers.append(server := Server(APP))
        assert server.get("/price/plum") == (200, b"PLUM")
        assert server.get("/price/pear") == (200, b"PEAR")
        # the server's measure remains (the wsgi integration), named by the path alone
        assert {i.name for i in trace.invocations()} == {
            "wsgi.GET /price/plum",
            "wsgi.GET /price/pear",
            MODULE + "work",
        }
    assert {name: Flask.__dict__[name] for name in ORIGINALS} == ORIGINALS
    warnings = [r.getMessage() for r in caplog.records if "integration flask" in r.getMessage()]
    assert warnings == [
        "invoseq: integration flask skipped for flask.app: AttributeError('Flask 9 moved wsgi_app')"
    ]


def test_the_test_client_is_measured_too(trace: Capture) -> None:
    # A request ends when its response is closed (PEP 3333's close(), which a server calls):
    # the test client's response, left open, would leave it in flight for good.
    with APP.test_client().get("/added") as response:
        assert response.data == b"added"
    assert [i.name for i in trace.invocations()] == [
        "flask.GET /added",
        MODULE + "work",
        MODULE + "added",
    ]
    assert all(i.end_ns is not None for i in trace.invocations())
    assert not measured.OPEN  # no request left in flight for an event loop's sampler to serve

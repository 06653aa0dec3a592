"""The aiohttp web server: each request one invocation named by its route's canonical template,
the handler a traced child however it was registered, the status of the response or of a raised
``web.HTTPException``; 5xx and other exceptions are errors; an application created before
instrumenting is measured; every patch undone; switchable off; a failing hook harmless."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web, web_app, web_urldispatcher

import tracer
from tests.integrations.async_servers import Aiohttp, only_servers, running
from tracer import traced
from tracer._patching import integrations
from tracer._patching.integrations import aiohttp_server
from tracer.testing import capture

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
MODULE = __name__ + "."

routes = web.RouteTableDef()


@traced
def work(item: str) -> str:
    return f"item {item}"


async def price(request: web.Request) -> web.Response:
    return web.Response(text=work(request.match_info["item"]))


@routes.get("/orders/{order}")
async def order(request: web.Request) -> web.Response:
    return web.Response(text=request.match_info["order"])


@routes.get("/missing")
async def missing(request: web.Request) -> web.Response:
    raise web.HTTPNotFound()


@routes.get("/unavailable")
async def unavailable(request: web.Request) -> web.Response:
    raise web.HTTPServiceUnavailable()


@routes.get("/fail")
async def fail(request: web.Request) -> web.Response:
    raise RuntimeError("out of stock")


@routes.get("/teapot")
async def teapot(request: web.Request) -> web.Response:
    return web.Response(status=507, text="full")


@routes.get("/traced")
@traced
async def already_traced(request: web.Request) -> web.Response:
    return web.Response(text="traced")


async def sub_price(request: web.Request) -> web.Response:
    return web.Response(text=work(request.match_info["item"]))


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/price/{item}", price)
    app.add_routes(routes)
    shop = web.Application()
    shop.router.add_route("GET", "/price/{item}", sub_price)
    app.add_subapp("/shop", shop)
    return app


@pytest.fixture(name="servers")
def _servers() -> Iterator[list[Aiohttp]]:
    yield from running()


@pytest.fixture(autouse=True)
def _uninstrumented(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    only_servers(monkeypatch)
    yield
    tracer.uninstrument()


def test_a_request_is_named_by_its_route_and_runs_its_handler_as_a_child(
    servers: list[Aiohttp],
) -> None:
    app = make_app()  # created before instrumenting
    with capture(instrument=True) as trace:
        server = Aiohttp(app)
        servers.append(server)
        assert server.get("/price/7") == (200, b"item 7")
        assert server.get("/orders/a1") == (200, b"a1")
        assert server.get("/shop/price/8") == (200, b"item 8")
        assert server.get("/traced") == (200, b"traced")
        assert trace.trees(strip=MODULE) == [
            {
                "name": "aiohttp.GET /price/{item}",
                "children": [{"name": "price", "children": [{"name": "work"}]}],
            },
            {"name": "aiohttp.GET /orders/{order}", "children": [{"name": "order"}]},
            {
                "name": "aiohttp.GET /shop/price/{item}",
                "children": [{"name": "sub_price", "children": [{"name": "work"}]}],
            },
            {"name": "aiohttp.GET /traced", "children": [{"name": "already_traced"}]},
        ]
        request = trace.invocations()[0]
    assert request.attributes == {
        "http.request.method": "GET",
        "url.path": "/price/7",
        "http.route": "/price/{item}",
        "http.response.status_code": 200,
    }


def test_an_incoming_traceparent_continues_its_sequence(servers: list[Aiohttp]) -> None:
    with capture(instrument=True) as trace:
        server = Aiohttp(make_app())
        servers.append(server)
        server.get("/price/1", {"traceparent": TRACEPARENT, "tracestate": "a=1"})
        server.get("/price/2")
        first, _, _, second, _, _ = trace.invocations()
    assert first.seq == TRACE_ID
    assert second.seq != TRACE_ID


def test_statuses_and_errors(servers: list[Aiohttp]) -> None:
    with capture(instrument=True) as trace:
        server = Aiohttp(make_app())
        servers.append(server)
        assert server.get("/missing")[0] == 404
        assert server.get("/unavailable")[0] == 503
        assert server.get("/fail")[0] == 500
        assert server.get("/teapot")[0] == 507
        assert server.get("/nowhere")[0] == 404
        requests = [i for i in trace.invocations() if i.name.startswith("aiohttp.")]
    assert [
        (i.name, i.status, i.error, (i.attributes or {}).get("http.response.status_code"))
        for i in requests
    ] == [
        ("aiohttp.GET /missing", "ok", None, 404),
        ("aiohttp.GET /unavailable", "error", "HTTPServiceUnavailable", 503),
        ("aiohttp.GET /fail", "error", "RuntimeError", 500),
        ("aiohttp.GET /teapot", "error", "HTTP 507", 507),
        ("aiohttp.GET /nowhere", "ok", None, 404),  # no route matched: its path names it
    ]


def test_uninstrument_restores_every_patched_attribute() -> None:
    def patched() -> list[Any]:
        return [
            vars(web_app.Application)["_handle"],
            vars(web_urldispatcher.UrlMappingMatchInfo)["handler"],
        ]

    originals = patched()
    tracer.instrument()
    tracer.instrument()
    assert [a is b for a, b in zip(patched(), originals, strict=True)] == [False, False]
    tracer.uninstrument()
    assert [a is b for a, b in zip(patched(), originals, strict=True)] == [True, True]


def test_after_uninstrument_a_server_set_up_before_is_no_longer_measured(
    servers: list[Aiohttp],
) -> None:
    """The server holds the patched ``_handle`` it was set up with; it passes through now."""
    with capture(instrument=True) as trace:
        server = Aiohttp(make_app())
        servers.append(server)
        assert server.get("/price/4") == (200, b"item 4")
        measured = [i.name for i in trace.invocations()]
        tracer.uninstrument()
        assert server.get("/price/5") == (200, b"item 5")
        assert [i.name for i in trace.invocations()] == [*measured, MODULE + "work"]
    assert measured == ["aiohttp.GET /price/{item}", MODULE + "price", MODULE + "work"]


def test_the_integration_is_switched_off_by_name(
    servers: list[Aiohttp], monkeypatch: pytest.MonkeyPatch
) -> None:
    only_servers(monkeypatch, "aiohttp_server")
    with capture(instrument=True) as trace:
        server = Aiohttp(make_app())
        servers.append(server)
        assert server.get("/price/3") == (200, b"item 3")
        assert [i.name for i in trace.invocations()] == [MODULE + "work"]


def test_a_failing_hook_skips_its_integration_with_one_warning(
    servers: list[Aiohttp],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(module: Any) -> Any:
        raise AttributeError("Application has no attribute '_handle'")

    monkeypatch.setitem(aiohttp_server.HOOKS, "aiohttp.web_app", broken)
    monkeypatch.setattr(integrations, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="tracer"), capture(instrument=True) as trace:
        tracer.instrument()
        server = Aiohttp(make_app())
        servers.append(server)
        assert server.get("/price/3") == (200, b"item 3")
        assert [i.name for i in trace.invocations()] == [MODULE + "work"]
    assert [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()] == [
        "invoseq: integration aiohttp_server skipped for aiohttp.web_app: "
        "AttributeError(\"Application has no attribute '_handle'\")"
    ]

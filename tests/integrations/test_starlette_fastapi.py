"""Starlette and FastAPI served by uvicorn: each request one invocation named by its route
template, the endpoint a traced child (a sync one in anyio's thread pool with the request as its
exact parent), the middleware outermost and never twice, applications built before instrumenting
measured too, every patch undone, each integration switchable off, and a failing hook harmless."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import fastapi
import fastapi.routing
import pytest
from anyio._backends import _asyncio as anyio_asyncio
from fastapi import APIRouter, FastAPI, HTTPException
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

import tracer
from tests.integrations.async_servers import Uvicorn, only_servers, running
from tracer import traced
from tracer._patching import integrations
from tracer._patching.integrations import fastapi as fastapi_integration
from tracer._patching.integrations import starlette as starlette_integration
from tracer._patching.integrations.asgi import InvoseqMiddleware
from tracer.testing import CapturedInvocation, capture

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
MODULE = __name__ + "."


@traced
def work(item: str) -> str:
    return f"item {item}"


async def price(request: Request) -> Response:
    return PlainTextResponse(work(request.path_params["item"]))


def sync_price(request: Request) -> Response:
    return PlainTextResponse(work(str(request.path_params["item"])))


async def fail(request: Request) -> Response:
    raise RuntimeError("out of stock")


async def unavailable(request: Request) -> Response:
    return PlainTextResponse("later", status_code=503)


async def static(scope: Scope, receive: Receive, send: Send) -> None:
    """A mounted ASGI application with no routes of its own."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"static"})


class Gate:
    """An endpoint that answers once ``count`` requests are in it together."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.arrived = 0
        self.opened: asyncio.Event | None = None

    async def wait(self, request: Request) -> Response:
        if self.opened is None:
            self.opened = asyncio.Event()
        self.arrived += 1
        if self.arrived == self.count:
            self.opened.set()
        await asyncio.wait_for(self.opened.wait(), 30)
        return PlainTextResponse(work(request.path_params["item"]))


def starlette_app(*, gate: Gate | None = None, **options: Any) -> Starlette:
    return Starlette(
        routes=[
            Route("/gate/{item}", (gate or Gate(1)).wait),
            Route("/price/{item}", price),
            Route("/sync/{item:int}", sync_price),
            Route("/fail", fail),
            Route("/unavailable", unavailable),
            Mount("/api/{version}", routes=[Route("/price/{item}", price)]),
            Mount("/static", app=static),
        ],
        **options,
    )


def fastapi_app() -> FastAPI:
    app = FastAPI()

    @app.get("/price/{item}")
    async def api_price(item: int) -> dict[str, str]:
        return {"price": work(str(item))}

    @app.get("/sync/{item}")
    def api_sync_price(item: int) -> dict[str, str]:
        return {"price": work(str(item))}

    @app.get("/missing")
    async def api_missing() -> None:
        raise HTTPException(status_code=404)

    @app.get("/fail")
    def api_fail() -> None:
        raise RuntimeError("out of stock")

    @app.get("/traced")
    @traced
    async def api_traced() -> str:
        return "traced"

    router = APIRouter()

    @router.get("/orders/{order}")
    async def api_order(order: str) -> dict[str, str]:
        return {"order": order}

    app.include_router(router, prefix="/shop")
    return app


def by_name(invocations: list[CapturedInvocation], name: str) -> list[CapturedInvocation]:
    return [i for i in invocations if i.name == name]


@pytest.fixture(name="servers")
def _servers() -> Iterator[list[Uvicorn]]:
    yield from running()


@pytest.fixture(autouse=True)
def _uninstrumented(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    only_servers(monkeypatch)
    yield
    tracer.uninstrument()


def test_a_starlette_request_is_named_by_its_route_and_runs_its_endpoint_as_a_child(
    servers: list[Uvicorn],
) -> None:
    with capture(instrument=True) as trace:
        server = Uvicorn(starlette_app())
        servers.append(server)
        assert server.get("/price/7") == (200, b"item 7")
        assert server.get("/sync/8") == (200, b"item 8")
        assert server.get("/sync/9") == (200, b"item 9")
        assert trace.trees(strip=MODULE) == [
            {
                "name": f"starlette.GET {route}",
                "children": [{"name": endpoint, "children": [{"name": "work"}]}],
            }
            for route, endpoint in [
                ("/price/{item}", "price"),
                ("/sync/{item}", "sync_price"),
                ("/sync/{item}", "sync_price"),
            ]
        ]
        invocations = trace.invocations()
    request = invocations[0]
    assert request.attributes == {
        "http.request.method": "GET",
        "url.path": "/price/7",
        "http.route": "/price/{item}",
        "http.response.status_code": 200,
    }
    for request, endpoint in [(invocations[3], invocations[4]), (invocations[6], invocations[7])]:
        assert endpoint.name == MODULE + "sync_price"
        assert endpoint.parent == request.iid  # exactly, though it ran in a worker thread
        assert endpoint.seq == request.seq
        assert endpoint.thread_name == "AnyIO worker thread" != request.thread_name


def test_requests_served_together_have_a_tree_each(servers: list[Uvicorn]) -> None:
    items = ["1", "2", "3", "4"]
    with capture(instrument=True) as trace:
        server = Uvicorn(starlette_app(gate=Gate(len(items))))
        servers.append(server)
        answers = server.get_together([f"/gate/{item}" for item in items])
        assert answers == [(200, f"item {item}".encode()) for item in items]
        trees = trace.trees(strip=MODULE)
        invocations = trace.invocations()
    assert trees == [
        {
            "name": "starlette.GET /gate/{item}",
            "children": [{"name": "Gate.wait", "children": [{"name": "work"}]}],
        }
    ] * len(items)
    requests = {i.iid: i for i in invocations if i.name.startswith("starlette.")}
    assert len({i.seq for i in invocations}) == len(items)
    for endpoint in (i for i in invocations if i.name == MODULE + "Gate.wait"):
        assert requests[endpoint.parent].seq == endpoint.seq


def test_routes_behind_mounts_are_named_with_the_mounts_templates(
    servers: list[Uvicorn],
) -> None:
    with capture(instrument=True) as trace:
        server = Uvicorn(starlette_app())
        servers.append(server)
        assert server.get("/api/v2/price/3") == (200, b"item 3")
        assert server.get("/static/logo.png") == (200, b"static")
        assert [i.name for i in trace.invocations() if i.name.startswith("starlette.")] == [
            "starlette.GET /api/{version}/price/{item}",
            "starlette.GET /static/{path}",
        ]


def test_starlette_errors_are_a_5xx_or_an_exception(servers: list[Uvicorn]) -> None:
    with capture(instrument=True) as trace:
        server = Uvicorn(starlette_app())
        servers.append(server)
        assert server.get("/fail")[0] == 500
        assert server.get("/unavailable")[0] == 503
        assert server.get("/nowhere")[0] == 404
        assert trace.trees(strip=MODULE) == [
            {
                "name": "starlette.GET /fail",
                "status": "error",
                "error": "RuntimeError",
                "children": [{"name": "fail", "status": "error", "error": "RuntimeError"}],
            },
            {
                "name": "starlette.GET /unavailable",
                "status": "error",
                "error": "HTTP 503",
                "children": [{"name": "unavailable"}],
            },
            {"name": "starlette.GET /nowhere"},
        ]
        statuses = [
            (i.attributes or {}).get("http.response.status_code") for i in trace.invocations()
        ]
    assert statuses == [500, None, 503, None, 404]


def test_an_incoming_traceparent_continues_its_sequence(servers: list[Uvicorn]) -> None:
    with capture(instrument=True) as trace:
        server = Uvicorn(starlette_app())
        servers.append(server)
        server.get("/price/1", {"traceparent": TRACEPARENT})
        request, endpoint, _ = trace.invocations()
    assert request.seq == endpoint.seq == TRACE_ID
    assert request.parent == 0  # its parent is in the calling process


def test_a_starlette_app_built_before_instrumenting_is_measured(servers: list[Uvicorn]) -> None:
    app = starlette_app()
    with capture(instrument=True) as trace:
        server = Uvicorn(app)
        servers.append(server)
        server.get("/sync/5")
        assert trace.trees(strip=MODULE) == [
            {
                "name": "starlette.GET /sync/{item}",
                "children": [{"name": "sync_price", "children": [{"name": "work"}]}],
            }
        ]


def test_a_middleware_added_by_hand_too_measures_each_request_once(
    servers: list[Uvicorn],
) -> None:
    with capture(instrument=True) as trace:
        app = starlette_app(middleware=[Middleware(InvoseqMiddleware)])
        server = Uvicorn(InvoseqMiddleware(app))  # and outside the application too
        servers.append(server)
        server.get("/price/2")
        server.get("/price/3")
        assert [i.name for i in trace.invocations()] == [
            # the outermost one measures; Starlette's, inside, makes it its own, by the route
            "starlette.GET /price/{item}",
            MODULE + "price",
            MODULE + "work",
        ] * 2


def test_a_fastapi_app_built_before_instrumenting_is_measured(servers: list[Uvicorn]) -> None:
    app = fastapi_app()
    with capture(instrument=True) as trace:
        server = Uvicorn(app)
        servers.append(server)
        assert server.get("/price/4") == (200, b'{"price":"item 4"}')
        assert server.get("/sync/5") == (200, b'{"price":"item 5"}')
        assert server.get("/shop/orders/a1") == (200, b'{"order":"a1"}')
        assert server.get("/traced") == (200, b'"traced"')
        prefix = MODULE + "fastapi_app.<locals>."
        assert trace.trees(strip=prefix) == [
            {
                "name": "fastapi.GET /price/{item}",
                "children": [{"name": "api_price", "children": [{"name": MODULE + "work"}]}],
            },
            {
                "name": "fastapi.GET /sync/{item}",
                "children": [{"name": "api_sync_price", "children": [{"name": MODULE + "work"}]}],
            },
            {"name": "fastapi.GET /shop/orders/{order}", "children": [{"name": "api_order"}]},
            {"name": "fastapi.GET /traced", "children": [{"name": "api_traced"}]},
        ]
        invocations = trace.invocations()
    request, endpoint = invocations[3], invocations[4]
    assert endpoint.name == prefix + "api_sync_price"
    assert endpoint.parent == request.iid
    assert endpoint.thread_name == "AnyIO worker thread" != request.thread_name
    assert request.attributes == {
        "http.request.method": "GET",
        "url.path": "/sync/5",
        "http.route": "/sync/{item}",
        "http.response.status_code": 200,
    }


def test_fastapi_errors(servers: list[Uvicorn]) -> None:
    with capture(instrument=True) as trace:
        server = Uvicorn(fastapi_app())
        servers.append(server)
        assert server.get("/missing") == (404, b'{"detail":"Not Found"}')
        assert server.get("/fail")[0] == 500
        assert trace.trees(strip=MODULE + "fastapi_app.<locals>.") == [
            {
                "name": "fastapi.GET /missing",  # the endpoint's HTTPException is its answer
                "children": [{"name": "api_missing", "status": "error", "error": "HTTPException"}],
            },
            {
                "name": "fastapi.GET /fail",
                "status": "error",
                "error": "RuntimeError",
                "children": [{"name": "api_fail", "status": "error", "error": "RuntimeError"}],
            },
        ]


def _patched() -> dict[str, Any]:
    """Every attribute the three integrations patch, as stored now (``_route_selected`` where
    FastAPI has one)."""
    found = {
        "Starlette.build_middleware_stack": vars(Starlette)["build_middleware_stack"],
        "Route.handle": vars(Route)["handle"],
        "Mount.handle": vars(Mount)["handle"],
        "FastAPI.build_middleware_stack": vars(FastAPI)["build_middleware_stack"],
        "run_endpoint_function": fastapi.routing.run_endpoint_function,
        "_route_selected": getattr(fastapi.routing, "_route_selected", None),
        "WorkerThread.__init__": vars(anyio_asyncio.WorkerThread)["__init__"],
    }
    return {name: value for name, value in found.items() if value is not None}


def test_uninstrument_restores_every_patched_attribute() -> None:
    originals = _patched()
    tracer.instrument()
    tracer.instrument()  # twice: still patched once
    patched = _patched()
    assert [name for name in originals if patched[name] is originals[name]] == []
    tracer.uninstrument()
    assert [name for name in originals if _patched()[name] is not originals[name]] == []


@pytest.mark.parametrize("make_app", [starlette_app, fastapi_app], ids=["starlette", "fastapi"])
def test_after_uninstrument_an_app_already_serving_is_no_longer_measured(
    servers: list[Uvicorn], make_app: Any
) -> None:
    """Its middleware stack, built while instrumented, stays with it and passes through."""
    with capture(instrument=True) as trace:
        server = Uvicorn(make_app())
        servers.append(server)
        assert server.get("/price/1")[0] == 200
        measured = [i.name for i in trace.invocations()]
        tracer.uninstrument()
        assert server.get("/price/2")[0] == 200
        assert [i.name for i in trace.invocations()] == [*measured, MODULE + "work"]
    assert measured[0].endswith(".GET /price/{item}")


@pytest.mark.parametrize(
    ("disabled", "make_app", "named"),
    [
        # uvicorn's own measure remains (the asgi integration), named by the path alone ...
        ("starlette", starlette_app, "asgi.GET /price/{int}"),
        # ... or by the route Starlette's routing (still patched) matched in a FastAPI app
        ("fastapi", fastapi_app, "asgi.GET /price/{item}"),
    ],
)
def test_an_integration_is_switched_off_by_name(
    servers: list[Uvicorn],
    monkeypatch: pytest.MonkeyPatch,
    disabled: str,
    make_app: Any,
    named: str,
) -> None:
    only_servers(monkeypatch, disabled)
    with capture(instrument=True) as trace:
        server = Uvicorn(make_app())
        servers.append(server)
        assert server.get("/price/6")[0] == 200
        assert [i.name for i in trace.invocations()] == [named, MODULE + "work"]


@pytest.mark.parametrize(
    "case",
    [
        (starlette_integration, "starlette.applications", starlette_app),
        (fastapi_integration, "fastapi.applications", fastapi_app),
    ],
    ids=["starlette", "fastapi"],
)
def test_a_failing_hook_skips_its_integration_with_one_warning(
    servers: list[Uvicorn],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    case: tuple[Any, str, Any],
) -> None:
    integration, module, make_app = case

    def broken(imported: Any) -> Any:
        raise AttributeError(f"{imported.__name__} of an unknown release")

    monkeypatch.setitem(integration.HOOKS, module, broken)
    monkeypatch.setattr(integrations, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="tracer"), capture(instrument=True) as trace:
        tracer.instrument()  # a second time: still one warning
        server = Uvicorn(make_app())
        servers.append(server)
        assert server.get("/price/6")[0] == 200
        name = integration.__name__.rpartition(".")[2]
        # No request measured (the endpoint may still be traced, by the module's other hook).
        assert [i.name for i in trace.invocations() if i.name.startswith(name)] == []
        assert trace.invocations()[-1].name == MODULE + "work"
    assert [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()] == [
        f"invoseq: integration {name} skipped for {module}: "
        f"AttributeError('{module} of an unknown release')"
    ]

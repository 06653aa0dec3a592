"""The ASGI middleware around a bare ASGI application served by uvicorn: one invocation per HTTP
request, continuing the caller's sequence, with the status the application sent; an exception or
a 5xx is an error; lifespan passes through; a middleware inside another measures nothing; a
framework's request under uvicorn goes through one coroutine of each measuring layer."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from fastapi import FastAPI

import tracer
from tests.integrations.async_servers import Uvicorn, only_servers, running
from tracer import traced
from tracer._core import context
from tracer._patching.integrations import asgi
from tracer._patching.integrations.asgi import InvoseqMiddleware
from tracer.testing import capture

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
MODULE = __name__ + "."
INTEGRATIONS = str(Path(tracer.__file__).parent / "_patching" / "integrations")


@traced
def work(path: str) -> str:
    return path.upper()


class App:
    """A bare ASGI application: ``/status/<code>`` answers that status, ``/raise`` raises, and
    every request reports what the middleware attached (the sequence, the scope's request)."""

    def __init__(self) -> None:
        self.sequences: list[str | None] = []
        self.lifespan: list[str] = []

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                self.lifespan.append(message["type"])
                if message["type"] == "lifespan.startup":
                    work("startup")
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path = scope["path"]
        self.sequences.append(context.current_sequence())
        if path == "/raise":
            raise LookupError("no such thing")
        status = int(path.rpartition("/")[2]) if path.startswith("/status/") else 200
        body = work(path).encode()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": body[:3], "more_body": True})
        await send({"type": "http.response.body", "body": body[3:]})


@pytest.fixture(name="servers")
def _servers() -> Iterator[list[Uvicorn]]:
    yield from running()


@pytest.fixture(autouse=True)
def _uninstrumented(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    only_servers(monkeypatch)
    yield
    tracer.uninstrument()


def test_a_request_is_an_invocation_with_its_work_as_a_child(
    servers: list[Uvicorn],
) -> None:
    app = App()
    with capture(instrument=True) as trace:
        server = Uvicorn(InvoseqMiddleware(app))
        servers.append(server)
        assert server.get("/orders/7") == (200, b"/ORDERS/7")
        assert trace.trees(strip=MODULE) == [
            {"name": "asgi.GET /orders/{int}", "children": [{"name": "work"}]}
        ]
        (request, _) = trace.invocations()
    assert request.attributes == {
        "http.request.method": "GET",
        "url.path": "/orders/7",
        "http.response.status_code": 200,
    }
    assert app.sequences == [request.seq]  # the application ran with the request attached


def test_an_incoming_traceparent_continues_its_sequence(servers: list[Uvicorn]) -> None:
    with capture(instrument=True) as trace:
        server = Uvicorn(InvoseqMiddleware(App()))
        servers.append(server)
        server.get("/a", {"traceparent": TRACEPARENT, "tracestate": "other=1"})
        server.get("/b")
        first, _, second, _ = trace.invocations()
    assert (first.name, second.name) == ("asgi.GET /a", "asgi.GET /b")
    assert first.seq == TRACE_ID
    assert second.seq != TRACE_ID


def test_a_5xx_status_and_an_exception_are_errors(servers: list[Uvicorn]) -> None:
    with capture(instrument=True) as trace:
        server = Uvicorn(InvoseqMiddleware(App()))
        servers.append(server)
        assert server.get("/status/404")[0] == 404
        assert server.get("/status/503")[0] == 503
        assert server.get("/raise")[0] == 500  # uvicorn's answer to the exception
        requests = [i for i in trace.invocations() if i.name.startswith("asgi.GET ")]
    not_found, unavailable, raised = requests
    assert [r.name for r in requests] == ["asgi.GET /status/{int}"] * 2 + ["asgi.GET /raise"]
    assert (not_found.status, not_found.attributes) == (
        "ok",
        {"http.request.method": "GET", "url.path": "/status/404", "http.response.status_code": 404},
    )
    assert (unavailable.status, unavailable.error) == ("error", "HTTP 503")
    assert unavailable.attributes is not None
    assert unavailable.attributes["error.type"] == "HTTP 503"
    assert (raised.status, raised.error) == ("error", "LookupError")
    assert raised.attributes is not None
    assert "http.response.status_code" not in raised.attributes  # nothing was sent


def test_the_lifespan_is_a_service_sequence_of_its_own(servers: list[Uvicorn]) -> None:
    app = App()
    with capture(instrument=True) as trace:
        server = Uvicorn(InvoseqMiddleware(app), lifespan="on")
        servers.append(server)
        server.get("/x")
        lifespan, startup, request, work_x = trace.invocations()
        assert lifespan.end_ns is None  # it lasts as long as the server
        servers.remove(server)
        server.stop()
        assert trace.trees(strip=MODULE) == [
            {"name": "invoseq.service.asgi.lifespan", "children": [{"name": "work"}]},
            {"name": "asgi.GET /x", "children": [{"name": "work"}]},
        ]
    assert app.lifespan == ["lifespan.startup", "lifespan.shutdown"]
    assert (lifespan.parent, startup.parent) == (0, lifespan.iid)
    assert (request.parent, work_x.parent) == (0, request.iid)
    assert request.seq != lifespan.seq  # a request is never part of the lifespan


def test_a_middleware_inside_another_measures_nothing(servers: list[Uvicorn]) -> None:
    with capture(instrument=True) as trace:
        server = Uvicorn(
            InvoseqMiddleware(InvoseqMiddleware(App(), framework="inner"), framework="outer")
        )
        servers.append(server)
        server.get("/x")
        assert trace.trees(strip=MODULE) == [
            {"name": "outer.GET /x", "children": [{"name": "work"}]}
        ]


def test_outside_a_recording_tracer_the_application_runs_untouched(
    servers: list[Uvicorn],
) -> None:
    app = App()
    server = Uvicorn(InvoseqMiddleware(app))
    servers.append(server)
    assert server.get("/x") == (200, b"/X")
    assert app.sequences == [None]


def test_the_scope_headers_getter_reads_every_line_of_a_name_in_any_case() -> None:
    scope = {
        "headers": [
            (b"traceparent", TRACEPARENT.encode()),
            (b"TraceState", b"a=1"),
            (b"tracestate", b"b=2"),
        ]
    }
    assert asgi.HEADERS.get(scope, "tracestate") == ["a=1", "b=2"]
    assert asgi.HEADERS.get(scope, "traceparent") == [TRACEPARENT]
    assert asgi.HEADERS.get(scope, "baggage") is None
    assert asgi.HEADERS.get({}, "traceparent") is None
    assert asgi.HEADERS.keys(scope) == ["traceparent", "TraceState", "tracestate"]


def test_a_traceparent_header_named_in_any_case_continues_its_sequence() -> None:
    # A server that does not lower-case header names (the ASGI specification asks it to)
    scope = {
        "type": "http",
        "method": "get",
        "path": "/a",
        "headers": [(b"host", b"x"), (b"TraceParent", TRACEPARENT.encode())],
    }

    async def send(message: MutableMapping[str, Any]) -> None:
        return None

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    with capture() as trace:
        asyncio.run(InvoseqMiddleware(App())(scope, receive, send))
        (request, _) = trace.invocations()
    assert (request.name, request.seq) == ("asgi.GET /a", TRACE_ID)


def test_a_scope_with_headers_that_are_not_asgis_runs_its_request_untouched() -> None:
    scope = {"type": "http", "method": "GET", "path": "/a", "headers": [b"not a pair", 7]}
    answered: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        answered.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    with capture() as trace:
        asyncio.run(InvoseqMiddleware(App())(scope, receive, send))
        (request, _) = trace.invocations()
    assert request.name == "asgi.GET /a"  # measured, as a request with no traceparent
    assert [m["type"] for m in answered] == ["http.response.start"] + ["http.response.body"] * 2


def _integration_frames(top: FrameType | None) -> list[str]:
    """The qualified names of the integrations' frames from ``top`` outwards."""
    names = []
    while top is not None:
        if top.f_code.co_filename.startswith(INTEGRATIONS):
            names.append(top.f_code.co_qualname)
        top = top.f_back
    return names


def test_a_fastapi_request_under_uvicorn_runs_in_one_coroutine_of_the_measuring_layers(
    servers: list[Uvicorn],
) -> None:
    """The server's layer measures the request; FastAPI's own layer only refines it (it becomes
    FastAPI's) and hands the inner stack's coroutine back, adding no frame to each step."""
    seen: list[list[str]] = []
    app = FastAPI()

    @app.get("/layers/{item}")
    async def layers(item: int) -> dict[str, int]:
        seen.append(_integration_frames(sys._getframe()))
        return {"item": item}

    with capture(instrument=True) as trace:
        server = Uvicorn(app)
        servers.append(server)
        assert server.get("/layers/3") == (200, b'{"item":3}')
        names = [i.name for i in trace.invocations()]
    # measured once, by the server's layer, and named by FastAPI's route
    assert names[0] == "fastapi.GET /layers/{item}"
    (frames,) = seen
    calls = [name for name in frames if name.endswith("__call__")]
    assert calls == ["InvoseqMiddleware.__call__"], frames

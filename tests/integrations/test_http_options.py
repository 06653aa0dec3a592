"""The HTTP integrations' options, as OpenTelemetry's instrumentations take them, on real
applications served by real servers: a request whose URL an excluded-URLs pattern matches (a
health check) is no invocation at all, and the headers an allow-list names are recorded on the
request's invocation (``http.request.header.<name>``, ``http.response.header.<name>``), from
OpenTelemetry's variables or invoseq's own settings (argument > environment)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web
from fastapi import FastAPI, Response
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import tracer
from tests.integrations import async_servers
from tests.integrations.wsgi_servers import Server
from tracer.testing import Capture, CapturedInvocation, capture

COUNT = 3  # requests of each kind


def flask_app() -> Flask:
    app = Flask("shop")

    @app.get("/price/<item>")
    def price(item: str) -> tuple[str, int, dict[str, str]]:
        return item.upper(), 200, {"X-Served-By": "shop-1", "X-Secret": "no"}

    @app.get("/healthz")
    def healthz() -> str:
        return "ok"

    return app


async def price(request: Request) -> PlainTextResponse:
    return PlainTextResponse(request.path_params["item"], headers={"X-Served-By": "shop-2"})


async def healthz(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def starlette_app() -> Starlette:
    return Starlette(routes=[Route("/price/{item}", price), Route("/healthz", healthz)])


def fastapi_app() -> FastAPI:
    app = FastAPI()

    @app.get("/price/{item}")
    async def quote(item: str, response: Response) -> str:
        response.headers["X-Served-By"] = "shop-3"
        return item

    @app.get("/healthz")
    async def health() -> str:
        return "ok"

    return app


@pytest.fixture(name="servers")
def _servers() -> Iterator[list[Any]]:
    yield from async_servers.running()


def _requests(trace: Capture) -> list[CapturedInvocation]:
    """The request invocations: every root (no view runs traced outside one)."""
    return [i for i in trace.invocations() if i.parent == 0]


@pytest.fixture(name="traced")
def _traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Capture]]:
    """``traced(**settings)``: a capture with the integrations installed, the clients off."""
    with contextlib.ExitStack() as stack:

        def start(**settings: Any) -> Capture:
            async_servers.only_servers(monkeypatch)
            return stack.enter_context(capture(instrument=True, **settings))

        try:
            yield start
        finally:
            stack.close()
            tracer.uninstrument()


@pytest.mark.parametrize(
    ("variable", "kind"),
    [
        ("OTEL_PYTHON_EXCLUDED_URLS", "werkzeug"),
        ("OTEL_PYTHON_FLASK_EXCLUDED_URLS", "werkzeug"),
        # wsgiref's hook measures the request before Flask sees it: Flask's list applies there too
        ("OTEL_PYTHON_FLASK_EXCLUDED_URLS", "wsgiref"),
    ],
)
def test_a_flask_request_an_excluded_url_matches_is_no_invocation(
    monkeypatch: pytest.MonkeyPatch, traced: Callable[..., Capture], variable: str, kind: str
) -> None:
    monkeypatch.setenv(variable, r"/healthz$,/metrics")
    trace = traced()
    server = Server(flask_app(), kind)
    try:
        for number in range(COUNT):
            assert server.get("/healthz") == (200, b"ok")
            assert server.get(f"/price/item{number}?healthz=1")[0] == 200  # searched: not at end
    finally:
        server.stop()
    names = [i.name for i in _requests(trace)]
    assert len(names) == COUNT
    assert set(names) == {"flask.GET /price/<item>"}
    assert [i for i in trace.invocations() if "healthz" in i.name] == []


def test_a_frameworks_own_list_replaces_the_general_one_for_its_requests(
    monkeypatch: pytest.MonkeyPatch, traced: Callable[..., Capture]
) -> None:
    monkeypatch.setenv("OTEL_PYTHON_EXCLUDED_URLS", "/price/")
    monkeypatch.setenv("OTEL_PYTHON_FLASK_EXCLUDED_URLS", "/healthz")
    trace = traced()
    server = Server(flask_app())
    try:
        assert server.get("/healthz")[0] == server.get("/price/a")[0] == 200
    finally:
        server.stop()
    assert [i.name for i in _requests(trace)] == ["flask.GET /price/<item>"]


def test_flask_records_the_request_and_response_headers_the_allow_lists_name(
    monkeypatch: pytest.MonkeyPatch, traced: Callable[..., Capture]
) -> None:
    capture_headers = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_"
    monkeypatch.setenv(capture_headers + "REQUEST", "X-Request-Id, x-tenant")
    monkeypatch.setenv(capture_headers + "RESPONSE", "x-served-by")
    trace = traced()
    server = Server(flask_app())
    try:
        headers = {"X-Request-Id": "r-42", "X-Tenant": "acme", "Authorization": "secret"}
        assert server.get("/price/apple", headers)[0] == 200
    finally:
        server.stop()
    (request,) = _requests(trace)
    recorded = {k: v for k, v in request.attributes.items() if ".header." in k}
    assert recorded == {
        "http.request.header.x-request-id": "r-42",
        "http.request.header.x-tenant": "acme",
        "http.response.header.x-served-by": "shop-1",
    }


@pytest.mark.parametrize("make_app", [starlette_app, fastapi_app])
def test_an_asgi_app_under_uvicorn_takes_invoseqs_settings_before_opentelemetrys(
    monkeypatch: pytest.MonkeyPatch,
    traced: Callable[..., Capture],
    servers: list[Any],
    make_app: Any,
) -> None:
    """The arguments of ``configure`` beat ``OTEL_PYTHON_EXCLUDED_URLS``; a header pattern is a
    regular expression matching the whole name, in any case."""
    monkeypatch.setenv("OTEL_PYTHON_EXCLUDED_URLS", "/price/")  # overridden by the argument
    trace = traced(
        excluded_urls=r"^http://127\.0\.0\.1:\d+/healthz$",
        capture_server_request_headers="x-request-.*",
        capture_server_response_headers="X-Served-By",
    )
    servers.append(server := async_servers.Uvicorn(make_app()))
    for number in range(COUNT):
        assert server.get("/healthz")[0] == 200
        assert server.get(f"/price/{number}", {"X-Request-Id": f"r-{number}"})[0] == 200
    requests = _requests(trace)
    framework = make_app.__name__.removesuffix("_app")
    assert [i.name for i in requests] == [f"{framework}.GET /price/{{item}}"] * COUNT
    assert [i.attributes["http.request.header.x-request-id"] for i in requests] == [
        f"r-{number}" for number in range(COUNT)
    ]
    served_by = {i.attributes["http.response.header.x-served-by"] for i in requests}
    assert served_by == {"shop-2" if framework == "starlette" else "shop-3"}
    assert [i for i in trace.invocations() if "healthz" in i.name] == []


def test_a_client_records_the_headers_its_allow_lists_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """requests to a real Flask server: the request's listed headers (its hand-off is not one of
    them) and the response's, on the client's invocation."""
    import requests

    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST", "x-tenant")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE", "X-Served-By")
    monkeypatch.setenv("INVOSEQ_DISABLED_INTEGRATIONS", "urllib3,http_client")
    server = Server(flask_app())
    try:
        with capture(instrument=True) as trace, requests.Session() as session:
            for _ in range(COUNT):
                response = session.get(f"{server.url}/price/pear", headers={"X-Tenant": "acme"})
                server.wait()
                assert response.status_code == 200
    finally:
        tracer.uninstrument()
        server.stop()
    sent = [i for i in trace.invocations() if i.name.startswith("requests.GET")]
    assert len(sent) == COUNT
    for invocation in sent:
        recorded = {k: v for k, v in invocation.attributes.items() if ".header." in k}
        assert recorded == {
            "http.request.header.x-tenant": "acme",
            "http.response.header.x-served-by": "shop-1",
        }


async def aiohttp_price(request: web.Request) -> web.Response:
    return web.Response(text=request.match_info["item"], headers={"X-Served-By": "shop-4"})


async def aiohttp_healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def test_aiohttp_takes_its_own_excluded_urls_and_records_listed_headers(
    monkeypatch: pytest.MonkeyPatch, traced: Callable[..., Capture], servers: list[Any]
) -> None:
    monkeypatch.setenv("OTEL_PYTHON_AIOHTTP_SERVER_EXCLUDED_URLS", "/healthz")
    trace = traced(
        capture_server_request_headers="X-Request-Id", capture_server_response_headers="x-served-by"
    )
    app = web.Application()
    app.router.add_get("/price/{item}", aiohttp_price)
    app.router.add_get("/healthz", aiohttp_healthz)
    servers.append(server := async_servers.Aiohttp(app))
    for number in range(COUNT):
        assert server.get("/healthz")[0] == 200
        assert server.get(f"/price/{number}", {"X-Request-Id": f"r-{number}"})[0] == 200
    requests = _requests(trace)
    assert [i.name for i in requests] == ["aiohttp.GET /price/{item}"] * COUNT
    assert [
        (
            i.attributes["http.request.header.x-request-id"],
            i.attributes["http.response.header.x-served-by"],
        )
        for i in requests
    ] == [(f"r-{number}", "shop-4") for number in range(COUNT)]


def test_under_uvicorn_a_frameworks_own_list_decides_for_its_requests(
    monkeypatch: pytest.MonkeyPatch, traced: Callable[..., Capture], servers: list[Any]
) -> None:
    """uvicorn's layer cannot tell the framework inside: the general list excludes the request
    there, but FastAPI's own list replaces it for FastAPI's requests, so FastAPI measures it,
    its endpoint a traced child; what FastAPI's list names is no invocation."""
    monkeypatch.setenv("OTEL_PYTHON_EXCLUDED_URLS", "/price/")
    monkeypatch.setenv("OTEL_PYTHON_FASTAPI_EXCLUDED_URLS", "/healthz")
    trace = traced()
    servers.append(server := async_servers.Uvicorn(fastapi_app()))
    assert server.get("/healthz")[0] == server.get("/price/1")[0] == 200
    (request,) = _requests(trace)
    assert request.name == "fastapi.GET /price/{item}"
    children = [i.name for i in trace.invocations() if i.parent == request.iid]
    assert children == [f"{__name__}.fastapi_app.<locals>.quote"]

"""What the client integration tests share: a real HTTP server on 127.0.0.1 that records the
headers of every request it receives, a port that refuses connections, and the same GET made
through each client library."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import queue
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import requests
import urllib3

import tracer
from invoseq import wire
from tracer._core import clock
from tracer._core.ids import as_hid
from tracer.propagation import parse_traceparent
from tracer.testing import Capture, CapturedInvocation, capture

TIMEOUT_S = 10.0
#: What the server answers for each path (anything else: 200).
STATUS = {"/fail": 500, "/redirect": 302}


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, list[str]]  # lower-case names, every field of each
    at_ns: int  # when the server read it, on the tracer's clock

    def one(self, name: str) -> str:
        [value] = self.headers[name]
        return value


class Server:
    """``ThreadingHTTPServer`` on a free port of 127.0.0.1, in a thread of its own."""

    def __init__(self) -> None:
        self.received: queue.Queue[Received] = queue.Queue()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                headers: dict[str, list[str]] = {}
                for name, value in self.headers.items():
                    headers.setdefault(name.lower(), []).append(value)
                server.received.put(Received(self.path, headers, clock.now()))
                body = b"done"
                self.send_response(STATUS.get(self.path, 200))
                if self.path == "/redirect":
                    self.send_header("Location", "/ok")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = False  # server_close() joins the request threads
        self.port = self.http.server_address[1]
        self.thread = threading.Thread(
            target=self.http.serve_forever, args=(0.05,), name="test-http-server"
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def next(self) -> Received:
        """The next request the server received (waits, bounded)."""
        return self.received.get(timeout=TIMEOUT_S)

    def nothing_more(self) -> None:
        assert self.received.empty(), f"unexpected request {self.received.get()}"


@contextmanager
def running_server() -> Iterator[Server]:
    server = Server()
    server.thread.start()
    try:
        yield server
    finally:
        server.http.shutdown()
        server.http.server_close()
        server.thread.join(TIMEOUT_S)
        assert not server.thread.is_alive()


@contextmanager
def refusing_port() -> Iterator[int]:
    """A port of 127.0.0.1 bound but not listening: connecting is refused at once, and nothing
    else can take it while the test runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        yield port


Headers = dict[str, str]
#: A traceparent the caller sets itself.
FOREIGN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def via_requests(url: str, headers: Headers) -> int:
    return requests.get(url, headers=headers, timeout=TIMEOUT_S).status_code


def via_urllib3(url: str, headers: Headers) -> int:
    manager = urllib3.PoolManager(timeout=TIMEOUT_S)
    try:
        return manager.request("GET", url, headers=headers).status
    finally:
        manager.clear()


def via_httpx(url: str, headers: Headers) -> int:
    with httpx.Client(timeout=TIMEOUT_S, follow_redirects=True) as client:
        return client.get(url, headers=headers).status_code


async def via_httpx_async(url: str, headers: Headers) -> int:
    async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=True) as client:
        return (await client.get(url, headers=headers)).status_code


async def via_aiohttp(url: str, headers: Headers) -> int:
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers=headers) as response,
    ):
        await response.read()
        return response.status


def via_urllib(url: str, headers: Headers) -> int:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S
        ) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:  # the 500 response
        error.close()
        return error.code


def via_http_client(url: str, headers: Headers) -> int:
    parts = urlsplit(url)
    assert parts.hostname is not None
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)
    try:
        connection.request("GET", parts.path, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@dataclass(frozen=True)
class Client:
    id: str
    library: str  # the module its invocations are named in
    raises: type[BaseException]  # what the caller sees when the connection is refused
    refused: str | None  # the invocation's error then, when it is not ``raises``'s name
    get: Callable[[str, Headers], int] | None = None
    get_async: Callable[[str, Headers], Coroutine[Any, Any, int]] | None = None

    def untraced(self, url: str, headers: Headers | None = None) -> int:
        if self.get_async is not None:
            return asyncio.run(self.get_async(url, headers or {}))
        assert self.get is not None
        return self.get(url, headers or {})

    def traced(self, url: str, headers: Headers | None = None) -> int:
        """The GET inside a traced caller (``call`` or ``call_async``)."""
        if self.get_async is not None:
            return asyncio.run(call_async(self.get_async, url, headers or {}))
        assert self.get is not None
        return call(self.get, url, headers or {})


@tracer.traced
def call(get: Callable[[str, Headers], int], url: str, headers: Headers) -> int:
    return get(url, headers)


@tracer.traced
async def call_async(
    get: Callable[[str, Headers], Coroutine[Any, Any, int]], url: str, headers: Headers
) -> int:
    return await get(url, headers)


CALLERS = (f"{__name__}.call", f"{__name__}.call_async")

CLIENTS = [
    Client("requests", "requests", requests.ConnectionError, None, get=via_requests),
    Client("urllib3", "urllib3", urllib3.exceptions.MaxRetryError, None, get=via_urllib3),
    Client("httpx", "httpx", httpx.ConnectError, None, get=via_httpx),
    Client("httpx_async", "httpx", httpx.ConnectError, None, get_async=via_httpx_async),
    Client("aiohttp", "aiohttp", aiohttp.ClientConnectorError, None, get_async=via_aiohttp),
    Client(
        "urllib_request",
        "http.client",
        urllib.error.URLError,  # wrapping the ConnectionRefusedError of http.client
        "ConnectionRefusedError",
        get=via_urllib,
    ),
    Client("http_client", "http.client", ConnectionRefusedError, None, get=via_http_client),
]
#: The clients whose redirects (and retries) stay inside one invocation.
FOLLOWING = [c for c in CLIENTS if c.id not in ("urllib_request", "http_client")]


def http_attributes(invocation: CapturedInvocation) -> dict[str, str | int | float | bool]:
    """The attributes an HTTP integration recorded (not the log records' of other patches)."""
    return {
        key: value
        for key, value in (invocation.attributes or {}).items()
        if key.partition(".")[0] in ("url", "http", "error", "server")
    }


def handoffs(trace: Capture) -> dict[int, wire.Handoff]:
    """Every hand-off captured, by hid (after ``trace.invocations()``, which flushes)."""
    return {
        event.hid: event
        for batch in trace.batches
        for chunk in batch.chunks
        for event in chunk.events
        if isinstance(event, wire.Handoff)
    }


def callers_and_clients(
    trace: Capture,
) -> tuple[list[CapturedInvocation], list[CapturedInvocation]]:
    """The traced callers (``call``/``call_async``) and every other invocation."""
    invocations = trace.invocations()
    callers = [i for i in invocations if i.name in CALLERS]
    return callers, [i for i in invocations if i not in callers]


@contextmanager
def instrumented() -> Iterator[Capture]:
    """Capture with every patch installed; every patch undone afterwards."""
    with capture(instrument=True) as trace:
        try:
            yield trace
        finally:
            tracer.uninstrument()


def name(library: str, server: Server, path: str) -> str:
    """The name of the client invocation of a GET of ``path`` on the server."""
    return f"{library}.GET 127.0.0.1:{server.port}{path}"


def handed_off_by(trace: Capture, traceparent: str) -> tuple[str, int]:
    """The sequence a received traceparent carries and the invocation whose hand-off it is."""
    parsed = parse_traceparent(traceparent)
    assert parsed is not None, traceparent
    handoff = handoffs(trace)[as_hid(parsed.parent_id)]
    assert handoff.kind == "remote"
    assert handoff.seq == parsed.trace_id
    return parsed.trace_id.hex(), handoff.parent

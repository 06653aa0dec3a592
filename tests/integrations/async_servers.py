"""Real servers for the tests of the asyncio server integrations, each on 127.0.0.1 with a loop in
a thread of its own, and a plain HTTP client (urllib, whose own integration the tests disable).

``Uvicorn`` serves an ASGI application behind ``Done``, an outermost ASGI wrapper that reports
each request once the application returned, so a test reads the trace only after the server
finished the request (the client may see the response a moment before that). The aiohttp server
ends the request's invocation before it writes the response, so its client needs no such wait.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import pytest
import uvicorn
from aiohttp import web

from tracer._patching import integrations

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]

#: Every client integration: off, so the trees hold the server's side alone.
CLIENTS = "requests,urllib3,httpx,aiohttp_client,http_client"
TIMEOUT_S = 30.0


def only_servers(monkeypatch: pytest.MonkeyPatch, *more: str) -> None:
    """Disable the client integrations (and ``more``) for the next ``instrument()``."""
    monkeypatch.setenv(integrations.DISABLED_ENV, ",".join((CLIENTS, *more)))


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``url``: (status, body), an error status included."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


class Done:
    """The outermost ASGI application: reports the path of each HTTP request it served."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.served: queue.Queue[str] = queue.Queue()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if scope["type"] == "http":
                self.served.put(scope["path"])


class _Server(uvicorn.Server):
    """A server whose ``done`` wraps, outermost, what uvicorn loaded (the asgi integration's
    measure included: a request is reported once that measure has ended too)."""

    def __init__(self, config: uvicorn.Config, done: Done) -> None:
        super().__init__(config)
        self.done = done
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.done.app = self.config.loaded_app
        self.config.loaded_app = self.done
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()


class Uvicorn:
    """uvicorn serving ``app`` on a socket of its own, in a thread; ``stop`` ends both. No
    lifespan unless asked: a lifespan is a service sequence of its own, which the tests of
    requests leave aside (``test_asgi`` has one of its own)."""

    def __init__(self, app: ASGIApp, *, lifespan: Literal["auto", "on", "off"] = "off") -> None:
        self.done = Done(app)
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        config = uvicorn.Config(
            app, log_level="warning", loop="asyncio", http="h11", lifespan=lifespan
        )
        self.server = _Server(config, self.done)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="test-uvicorn"
        )
        self.thread.start()
        if not self.server.ready.wait(TIMEOUT_S) or not self.server.started:
            self.stop()
            raise AssertionError("uvicorn did not start")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """GET ``path``, once the server finished serving it."""
        status, body = get(self.url + path, headers)
        served = self.done.served.get(timeout=TIMEOUT_S)
        assert served == path.partition("?")[0], (served, path)
        return status, body

    def get_together(self, paths: list[str]) -> list[tuple[int, bytes]]:
        """GET every path at once (a thread each), once the server finished serving them all."""
        with ThreadPoolExecutor(len(paths)) as pool:
            answers = list(pool.map(lambda path: get(self.url + path), paths))
        served = [self.done.served.get(timeout=TIMEOUT_S) for _ in paths]
        assert sorted(served) == sorted(paths), (served, paths)
        return answers

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(TIMEOUT_S)
        self.socket.close()
        assert not self.thread.is_alive(), "uvicorn did not stop"


class Aiohttp:
    """aiohttp's ``AppRunner`` serving ``app`` on a loop in a thread; ``stop`` ends them."""

    def __init__(self, app: web.Application) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-aiohttp")
        self.thread.start()
        self.runner = web.AppRunner(app)
        try:
            port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        self.url = f"http://127.0.0.1:{port}"

    async def _start(self) -> int:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port: int = self.runner.addresses[0][1]
        return port

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        return get(self.url + path, headers)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(TIMEOUT_S)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(TIMEOUT_S)
            assert not self.thread.is_alive(), "the aiohttp loop did not stop"
            self.loop.close()


def running() -> Iterator[list[Any]]:
    """The body of a test module's ``servers`` fixture: the servers a test starts (it appends
    them), each stopped at the end."""
    started: list[Uvicorn | Aiohttp] = []
    yield started
    for server in reversed(started):
        server.stop()

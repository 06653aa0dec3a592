"""Real WSGI servers for the tests of the WSGI, Flask and Django integrations, each on 127.0.0.1
in threads of the test: werkzeug's threaded development server and a threaded ``wsgiref`` server
(whose handler the ``wsgi`` integration patches), and the trace fixture the tests share.

A server reports each connection once it finished serving it, after the response iterable was
closed (where the measured request ends): the client may see the whole response a moment before,
so ``get`` waits for that report before a test reads the trace.
"""

from __future__ import annotations

import queue
import socketserver
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler as WsgirefHandler
from wsgiref.simple_server import WSGIServer

import pytest
from werkzeug.serving import ThreadedWSGIServer
from werkzeug.serving import WSGIRequestHandler as WerkzeugHandler

import tracer
from tests.integrations.async_servers import TIMEOUT_S, get, only_servers
from tracer.testing import Capture, CapturedInvocation, capture

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class _Reporting:
    """Mixed into a threaded ``socketserver`` server: reports each connection it closed."""

    served: queue.Queue[None]

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)  # type: ignore[misc]
        self.served.put(None)


class _Werkzeug(_Reporting, ThreadedWSGIServer):
    pass


class _QuietWerkzeug(WerkzeugHandler):
    def log(self, type: str, message: str, *args: Any) -> None:
        pass


class _Wsgiref(_Reporting, socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietWsgiref(WsgirefHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Server:
    """``app`` served by werkzeug (``kind="werkzeug"``) or wsgiref in a thread; ``stop`` ends it."""

    def __init__(self, app: WSGIApplication, kind: str = "werkzeug") -> None:
        self.server: _Werkzeug | _Wsgiref
        if kind == "werkzeug":
            self.server = _Werkzeug("127.0.0.1", 0, app, handler=_QuietWerkzeug)
        else:
            self.server = _Wsgiref(("127.0.0.1", 0), _QuietWsgiref)
            self.server.set_app(app)
        self.server.served = queue.Queue()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"test-{kind}"
        )
        self.thread.start()

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """GET ``path`` (status and body), once the server finished serving it."""
        status, body = get(self.url + path, headers)
        self.server.served.get(timeout=TIMEOUT_S)
        return status, body

    def wait(self) -> None:
        """Until the server finished serving the request a test made by itself."""
        self.server.served.get(timeout=TIMEOUT_S)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(TIMEOUT_S)
        assert not self.thread.is_alive(), "the server did not stop"


def post(url: str, data: bytes) -> tuple[int, bytes]:
    """POST ``data`` to ``url``: (status, body), an error status included."""
    request = urllib.request.Request(url, data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def servers() -> Iterator[list[Any]]:
    """The body of a test module's ``servers`` fixture: the servers a test starts (it appends
    them), each stopped at the end."""
    started: list[Any] = []
    yield started
    for server in reversed(started):
        server.stop()


def traced(monkeypatch: pytest.MonkeyPatch, *disabled: str) -> Iterator[Capture]:
    """The body of a test module's ``trace`` fixture: a capture with the integrations installed,
    the clients' (and ``disabled``) off; uninstrumented at the end."""
    only_servers(monkeypatch, *disabled)
    try:
        with capture(instrument=True) as trace:
            yield trace
    finally:
        tracer.uninstrument()


@contextmanager
def capturing(monkeypatch: pytest.MonkeyPatch, *disabled: str) -> Iterator[Capture]:
    """``traced`` as a context manager, for a test that changes an integration first."""
    yield from traced(monkeypatch, *disabled)


def named(trace: Capture, name: str) -> list[CapturedInvocation]:
    return [i for i in trace.invocations() if i.name == name]


def one(trace: Capture, name: str) -> CapturedInvocation:
    found = named(trace, name)
    assert len(found) == 1, (name, [i.name for i in trace.invocations()])
    return found[0]


def children(trace: Capture, parent: CapturedInvocation) -> list[str]:
    return [i.name for i in trace.invocations() if i.parent == parent.iid]

"""The WSGI integration: any application wsgiref runs (no code change) and any application in
``InvoseqMiddleware`` is one invocation per request, continuing the caller's sequence, with the
status it started the response with; the body it streams counts, and so does its ``close``; an
exception or a 5xx is an error. gunicorn's WSGI workers wrap the application they load."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import wsgiref.handlers
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from wsgiref.util import FileWrapper

import pytest
from gunicorn.workers import base as gunicorn_base
from gunicorn.workers import sync as gunicorn_sync

import tracer
from tests.integrations import wsgi_servers
from tests.integrations.async_servers import CLIENTS, get
from tests.integrations.wsgi_servers import (
    TRACE_ID,
    TRACEPARENT,
    Server,
    capturing,
    children,
    named,
    one,
)
from tests.processes.web_support import wait_until_listening
from tests.support import free_port
from tracer import traced
from tracer._patching import integrations
from tracer._patching.integrations import wsgi
from tracer.testing import Capture

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

MODULE = __name__ + "."
LOAD_WSGI = gunicorn_base.Worker.__dict__["load_wsgi"]


@traced
def work(text: str) -> bytes:
    return text.upper().encode()


class Closing:
    """A response body with a ``close`` that does traced work (as a file or a cursor would)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.chunks)

    def close(self) -> None:
        work("closing")
        self.closed = True


class File(io.BytesIO):
    def close(self) -> None:
        work("closing")
        super().close()


def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    """``/status/<code>`` answers that code, ``/raise`` raises, ``/stream`` streams a body that
    calls ``work`` between chunks, ``/broken`` raises in its body, ``/closing`` has a close."""
    path = environ["PATH_INFO"]
    if path == "/raise":
        raise LookupError("no such thing")
    status = path.rpartition("/")[2] if path.startswith("/status/") else "200"
    start_response(f"{status} Whatever", [("Content-Type", "text/plain")])
    if path == "/stream":
        return streamed()
    if path == "/broken":
        return broken()
    if path == "/closing":
        return Closing([b"a", b"b"])
    if path == "/file":
        return environ["wsgi.file_wrapper"](File(b"from a file"))  # type: ignore[no-any-return]
    return [work(path)]


def streamed() -> Iterator[bytes]:
    yield b"first "
    yield work("second")


def broken() -> Iterator[bytes]:
    yield b"first"
    raise RuntimeError("cut short")


@pytest.fixture(name="servers")
def _servers() -> Iterator[list[Server]]:
    yield from wsgi_servers.servers()


@pytest.fixture(name="trace")
def _trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[Capture]:
    yield from wsgi_servers.traced(monkeypatch)


def test_an_application_wsgiref_runs_is_measured_with_no_code_change(
    trace: Capture, servers: list[Server]
) -> None:
    servers.append(server := Server(app, "wsgiref"))
    assert server.get("/orders/7") == (200, b"/ORDERS/7")
    request = one(trace, "wsgi.GET /orders/{int}")
    assert request.status == "ok"
    assert request.parent == 0
    assert request.attributes == {
        "http.request.method": "GET",
        "url.path": "/orders/7",
        "http.response.status_code": 200,
    }
    assert children(trace, request) == [MODULE + "work"]


def test_the_middleware_continues_the_callers_sequence(
    trace: Capture, servers: list[Server]
) -> None:
    servers.append(server := Server(wsgi.InvoseqMiddleware(app)))
    server.get("/a", {"traceparent": TRACEPARENT, "tracestate": "other=1"})
    server.get("/b")
    first, second = named(trace, "wsgi.GET /a") + named(trace, "wsgi.GET /b")
    assert first.seq == TRACE_ID
    assert second.seq != TRACE_ID
    works = named(trace, MODULE + "work")
    assert [w.parent for w in works] == [first.iid, second.iid]


def test_a_streamed_body_and_the_close_count_in_the_request(
    trace: Capture, servers: list[Server]
) -> None:
    servers.append(server := Server(wsgi.InvoseqMiddleware(app)))
    assert server.get("/stream") == (200, b"first SECOND")
    assert server.get("/closing") == (200, b"ab")
    streaming, closing = named(trace, "wsgi.GET /stream") + named(trace, "wsgi.GET /closing")
    second, closed = named(trace, MODULE + "work")
    assert second.parent == streaming.iid
    assert closed.parent == closing.iid
    assert streaming.end_ns is not None
    assert second.end_ns is not None
    assert streaming.end_ns >= second.end_ns
    assert closing.end_ns is not None
    assert closed.end_ns is not None
    assert closing.end_ns >= closed.end_ns


def test_an_exception_or_a_5xx_is_an_error(trace: Capture, servers: list[Server]) -> None:
    servers.append(server := Server(app, "wsgiref"))
    assert server.get("/raise")[0] == 500
    assert server.get("/status/503")[0] == 503
    assert server.get("/status/404")[0] == 404
    raised = one(trace, "wsgi.GET /raise")
    unavailable, missing = named(trace, "wsgi.GET /status/{int}")
    assert (raised.status, raised.error) == ("error", "LookupError")
    assert (unavailable.status, unavailable.error) == ("error", "HTTP 503")
    assert unavailable.attributes is not None
    assert unavailable.attributes["http.response.status_code"] == 503
    assert unavailable.attributes["error.type"] == "HTTP 503"
    assert (missing.status, missing.error) == ("ok", None)


def test_an_exception_in_the_body_is_an_error(trace: Capture, servers: list[Server]) -> None:
    servers.append(server := Server(wsgi.InvoseqMiddleware(app)))
    with pytest.raises(Exception):  # noqa: B017, PT011 (the connection breaks, as it may)
        server.get("/broken")
    server.server.served.get(timeout=30)
    request = one(trace, "wsgi.GET /broken")
    assert (request.status, request.error) == ("error", "RuntimeError")


def test_a_file_wrapper_stays_one_and_ends_the_request_at_its_close(
    trace: Capture, servers: list[Server]
) -> None:
    servers.append(server := Server(app, "wsgiref"))
    assert server.get("/file") == (200, b"from a file")
    request = one(trace, "wsgi.GET /file")
    assert request.status == "ok"
    assert children(trace, request) == [MODULE + "work"]  # the close, inside


def test_the_file_wrapper_itself_goes_to_the_server(trace: Capture) -> None:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/file", "wsgi.file_wrapper": FileWrapper}
    result = wsgi.serve("wsgi", app, environ, lambda status, headers, exc_info=None: print)
    assert type(result) is FileWrapper
    assert list(result) == [b"from a file"]
    assert named(trace, "wsgi.GET /file") == []  # not ended (nor opened: no route names it)
    result.close()  # type: ignore[attr-defined]
    assert named(trace, "wsgi.GET /file")[0].status == "ok"


def test_two_layers_measure_a_request_once(trace: Capture, servers: list[Server]) -> None:
    servers.append(server := Server(wsgi.InvoseqMiddleware(wsgi.InvoseqMiddleware(app)), "wsgiref"))
    server.get("/x")
    assert [i.name for i in trace.invocations()] == ["wsgi.GET /x", MODULE + "work"]


def test_the_environ_carrier_reads_joined_tracestate_fields() -> None:
    environ = {"HTTP_TRACEPARENT": TRACEPARENT, "HTTP_TRACESTATE": "a=1,b=2", "PATH_INFO": "/"}
    assert wsgi.ENVIRON.get(environ, "tracestate") == ["a=1,b=2"]
    assert wsgi.ENVIRON.get(environ, "baggage") is None
    assert sorted(wsgi.ENVIRON.keys(environ)) == ["traceparent", "tracestate"]


def test_outside_a_capture_and_uninstrumented_the_application_runs_as_it_is(
    servers: list[Server],
) -> None:
    original = wsgiref.handlers.BaseHandler.__dict__["run"]
    tracer.instrument()
    assert wsgiref.handlers.BaseHandler.__dict__["run"] is not original
    tracer.uninstrument()
    assert wsgiref.handlers.BaseHandler.__dict__["run"] is original
    assert gunicorn_base.Worker.__dict__["load_wsgi"] is LOAD_WSGI
    servers.append(server := Server(app, "wsgiref"))
    assert server.get("/plain") == (200, b"/PLAIN")


def test_switched_off_by_name(monkeypatch: pytest.MonkeyPatch, servers: list[Server]) -> None:
    with capturing(monkeypatch, "wsgi") as trace:
        servers.append(server := Server(app, "wsgiref"))
        assert server.get("/off") == (200, b"/OFF")
        assert [i.name for i in trace.invocations()] == [MODULE + "work"]


def test_a_hook_that_fails_skips_the_integration_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, servers: list[Server]
) -> None:
    def broken(module: Any) -> Any:
        raise AttributeError("BaseHandler moved")

    monkeypatch.setitem(wsgi.HOOKS, "wsgiref.handlers", broken)
    monkeypatch.setattr(integrations, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="tracer"), capturing(monkeypatch) as trace:
        servers.append(server := Server(app, "wsgiref"))
        assert server.get("/x") == (200, b"/X")
        assert server.get("/y") == (200, b"/Y")
        assert [i.name for i in trace.invocations()] == [MODULE + "work"] * 2
    warnings = [r.getMessage() for r in caplog.records if "integration wsgi" in r.getMessage()]
    assert warnings == [
        "invoseq: integration wsgi skipped for wsgiref.handlers: "
        "AttributeError('BaseHandler moved')"
    ]


class _App:
    def wsgi(self) -> Any:
        return app


class OtherWorker(gunicorn_base.Worker):
    """A worker whose ``wsgi`` is no WSGI application (uvicorn's runs an ASGI one)."""


@pytest.mark.parametrize(
    ("worker", "wrapped"), [(gunicorn_sync.SyncWorker, True), (OtherWorker, False)]
)
def test_gunicorns_wsgi_workers_wrap_the_application_they_load(
    trace: Capture, worker: type[gunicorn_base.Worker], wrapped: bool
) -> None:
    loaded = object.__new__(worker)
    loaded.app = _App()  # type: ignore[assignment]
    loaded.load_wsgi()
    assert isinstance(loaded.wsgi, wsgi.InvoseqMiddleware) is wrapped
    if wrapped:
        loaded.load_wsgi()  # loaded again (a reload): wrapped once
        assert loaded.wsgi.app is app  # type: ignore[attr-defined]


GUNICORN_CONFIG = """
import json
import os

from tracer.testing import capture

control_socket_disable = True  # gunicorn 27's control socket, in the user's home otherwise
_open = {}


def post_fork(server, worker):
    _open["capture"] = capture(instrument=True)
    _open["trace"] = _open["capture"].__enter__()


def worker_exit(server, worker):
    trace = _open["trace"]
    rows = [[i.name, i.iid, i.parent, i.seq, i.status, i.error, i.attributes]
            for i in trace.invocations()]
    with open(os.environ["TEST_TRACE_FILE"], "w") as out:
        json.dump(rows, out)
    _open["capture"].__exit__(None, None, None)
"""

GUNICORN_APP = """
from tracer import traced


@traced
def work(path):
    return path.encode()


def app(environ, start_response):
    path = environ["PATH_INFO"]
    start_response("503 Busy" if path == "/busy" else "200 OK", [("Content-Type", "text/plain")])
    return [work(path)]
"""


@pytest.mark.parametrize("kind", ["sync", "gthread"])
def test_a_plain_application_under_gunicorn_is_measured_with_no_code_change(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "gunicorn_conf.py").write_text(GUNICORN_CONFIG)
    (tmp_path / "plain_app.py").write_text(GUNICORN_APP)
    traces = tmp_path / "trace.json"
    env = dict(
        os.environ,
        TEST_TRACE_FILE=str(traces),
        INVOSEQ_DISABLED_INTEGRATIONS=CLIENTS,
        PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]),
    )
    command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn_conf.py", "-k", kind]
    port = free_port()
    command += ["-w", "1", "-b", f"127.0.0.1:{port}", "plain_app:app"]
    with subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            wait_until_listening(port, process, timeout_s=60)
            url = f"http://127.0.0.1:{port}"
            assert get(url + "/a", {"traceparent": TRACEPARENT}) == (200, b"/a")
            assert get(url + "/busy") == (503, b"/busy")
        finally:
            process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=60)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, output
    rows = json.loads(traces.read_text())
    assert [(name, status, error) for name, _, _, _, status, error, _ in rows] == [
        ("wsgi.GET /a", "ok", None),
        ("plain_app.work", "ok", None),
        ("wsgi.GET /busy", "error", "HTTP 503"),
        ("plain_app.work", "ok", None),
    ]
    first, work_a, busy, work_busy = rows
    assert first[3] == TRACE_ID
    assert (work_a[2], work_busy[2]) == (first[1], busy[1])
    assert first[6] == {
        "http.request.method": "GET",
        "url.path": "/a",
        "http.response.status_code": 200,
    }

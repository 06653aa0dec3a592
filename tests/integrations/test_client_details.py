"""Client integrations in detail: http.client's request and response as two calls, a request
object sent twice, the caller's headers left as they were, nothing imported before the program
imports it, and a library version of another shape left alone (the requests, the server and the
clients are those of ``test_clients``)."""

from __future__ import annotations

import http.client
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator

import httpx
import pytest
import requests
import urllib3
from opentelemetry import context as otel_context

import tracer
from tests.integrations.client_support import (
    FOREIGN,
    TIMEOUT_S,
    Server,
    call,
    callers_and_clients,
    handed_off_by,
    http_attributes,
    instrumented,
    name,
    running_server,
    via_http_client,
    via_requests,
)
from tracer._patching.integrations import requests as requests_integration
from tracer._patching.integrations import urllib3 as urllib3_integration
from tracer._patching.integrations._http import STATUS, URL
from tracer.testing import Capture


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with instrumented() as trace:
        yield trace


@pytest.fixture(name="server")
def _server() -> Iterator[Server]:
    with running_server() as server:
        yield server


@tracer.traced
def between() -> None:
    """Traced code the caller runs between http.client's request() and getresponse()."""


def test_http_client_code_between_request_and_response_runs_under_the_caller(
    server: Server, trace: Capture
) -> None:
    def interleaved(url: str, headers: dict[str, str]) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
        try:
            connection.request("GET", "/ok")
            between()
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    assert call(interleaved, server.url("/ok"), {}) == 200
    server.next()
    [caller], [sent, inner] = callers_and_clients(trace)
    assert sent.name == name("http.client", server, "/ok")
    assert inner.name == f"{__name__}.between"
    assert sent.parent == inner.parent == caller.iid
    assert http_attributes(sent)[STATUS] == 200


def test_http_client_request_whose_response_is_never_read_ends_at_close_or_next_request(
    server: Server, trace: Capture
) -> None:
    def abandoned(url: str, headers: dict[str, str]) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
        try:
            connection.request("GET", "/first")
            server.next()
            with pytest.raises(http.client.CannotSendRequest):  # the first is still pending
                connection.request("GET", "/second")
        finally:
            connection.close()
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT_S)
        connection.request("GET", "/third")
        server.next()
        connection.close()
        return 0

    call(abandoned, server.url("/"), {})
    [caller], [first, second, third] = callers_and_clients(trace)
    assert [i.name for i in (first, second, third)] == [
        name("http.client", server, path) for path in ("/first", "/second", "/third")
    ]
    assert (first.status, http_attributes(first)) == ("ok", {URL: server.url("/first")})
    assert (first.end_ns or 0) <= second.start_ns
    assert (second.status, second.error) == ("error", "CannotSendRequest")
    assert (third.status, http_attributes(third)) == ("ok", {URL: server.url("/third")})
    assert (third.end_ns or 0) <= (caller.end_ns or 0)
    server.nothing_more()


def test_a_request_object_sent_again_carries_a_fresh_hand_off_of_its_own(
    server: Server, trace: Capture
) -> None:
    def twice(url: str, headers: dict[str, str]) -> int:
        with httpx.Client(timeout=TIMEOUT_S) as client:
            request = client.build_request("GET", url)
            client.send(request)
            client.send(request)
            foreign = client.build_request("GET", url, headers={"traceparent": FOREIGN})
            client.send(foreign)
        with requests.Session() as session:
            prepared = session.prepare_request(requests.Request("GET", url))
            session.send(prepared, timeout=TIMEOUT_S)
            session.send(prepared, timeout=TIMEOUT_S)
        return 0

    call(twice, server.url("/ok"), {})
    received = [server.next().one("traceparent") for _ in range(5)]
    [caller], sent = callers_and_clients(trace)
    assert [i.name.partition(".")[0] for i in sent] == ["httpx"] * 3 + ["requests"] * 2
    assert received[2] == FOREIGN
    del received[2], sent[2]
    assert [handed_off_by(trace, value) for value in received] == [
        (caller.seq, i.iid) for i in sent
    ]


def test_the_headers_the_caller_passes_are_not_changed(server: Server, trace: Capture) -> None:
    headers = {"X-Caller": "kept"}

    def reusing(url: str, given: dict[str, str]) -> int:
        manager = urllib3.PoolManager(timeout=TIMEOUT_S)
        manager.request("GET", url, headers=headers)
        manager.clear()
        pool = urllib3.HTTPConnectionPool(
            "127.0.0.1", server.port, headers={"X-Pool": "default"}, timeout=TIMEOUT_S
        )
        pool.urlopen(
            "GET", "/ok", None, headers
        )  # headers positional, as urllib3's retries pass it
        pool.urlopen("GET", "/ok")  # none: the pool's own
        pool.close()
        via_http_client(url, headers)
        return 0

    call(reusing, server.url("/ok"), {})
    received = [server.next() for _ in range(4)]
    assert headers == {"X-Caller": "kept"}
    assert [r.headers.get("x-caller") for r in received] == [["kept"], ["kept"], None, ["kept"]]
    assert received[2].one("x-pool") == "default"
    [caller], sent = callers_and_clients(trace)
    assert [handed_off_by(trace, r.one("traceparent")) for r in received] == [
        (caller.seq, i.iid) for i in sent
    ]


def test_no_client_library_is_imported_until_the_program_imports_it() -> None:
    program = textwrap.dedent(
        """
        import sys
        import tracer
        tracer.instrument()
        libraries = {"requests", "urllib3", "httpx", "aiohttp"}
        assert not libraries & {m.partition(".")[0] for m in sys.modules}, sorted(sys.modules)
        import aiohttp, httpx, requests, urllib3
        patched = [
            requests.Session.__dict__["send"],
            urllib3.PoolManager.__dict__["urlopen"],
            httpx.AsyncClient.__dict__["send"],
            aiohttp.ClientSession.__dict__["_request"],
        ]
        assert all("tracer/_patching" in f.__code__.co_filename for f in patched), patched
        tracer.uninstrument()
        assert "tracer/" not in requests.Session.__dict__["send"].__code__.co_filename
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_library_version_with_another_signature_is_left_unpatched() -> None:
    class Pool:
        def urlopen(self, url: str, method: str) -> None: ...

    class Session: ...

    pool_module = types.ModuleType("urllib3.connectionpool")
    pool_module.HTTPConnectionPool = Pool  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="urlopen takes"):
        list(urllib3_integration.HOOKS["urllib3.connectionpool"](pool_module))
    sessions_module = types.ModuleType("requests.sessions")
    sessions_module.Session = Session  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"Session\.send is not a function"):
        list(requests_integration.HOOKS["requests.sessions"](sessions_module))


def test_a_request_sent_while_opentelemetry_suppresses_instrumentation_is_not_measured(
    server: Server, trace: Capture
) -> None:
    def exporting(url: str, headers: dict[str, str]) -> int:
        suppressed = otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True)
        token = otel_context.attach(suppressed)  # as the SDK's exporters do
        try:
            return via_requests(url, headers)
        finally:
            otel_context.detach(token)

    assert call(exporting, server.url("/ok"), {}) == 200
    assert "traceparent" not in server.next().headers
    [_], sent = callers_and_clients(trace)
    assert sent == []

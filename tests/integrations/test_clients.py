"""Client integrations against a real server: every request that requests, urllib3, httpx (sync
and async), aiohttp's client, urllib.request or http.client sends is one invocation
``"GET host/path"`` under its caller, handing off to the server in ``traceparent``; the caller's
headers (and a traceparent of its own) are kept; a 5xx or an exception marks it an error and the
exception reaches the caller unchanged; one library sending through another is one invocation;
an integration switches off by name; uninstrument restores every patched attribute."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest
import requests
import urllib3

import tracer
from tests.integrations.client_support import (
    CLIENTS,
    FOLLOWING,
    FOREIGN,
    Client,
    Server,
    call,
    callers_and_clients,
    handed_off_by,
    handoffs,
    http_attributes,
    instrumented,
    name,
    refusing_port,
    running_server,
    via_requests,
    via_urllib,
)
from tracer._core.ids import as_hid
from tracer._patching.integrations import DISABLED_ENV
from tracer._patching.integrations._http import ERROR_TYPE, STATUS, URL
from tracer.propagation import parse_traceparent
from tracer.testing import Capture, capture


def parent_hid(traceparent: str) -> int:
    parsed = parse_traceparent(traceparent)
    assert parsed is not None, traceparent
    return as_hid(parsed.parent_id)


#: Every attribute the client integrations patch.
PATCHED: list[tuple[Any, str]] = [
    (requests.sessions.Session, "send"),
    (urllib3.connectionpool.HTTPConnectionPool, "urlopen"),
    (urllib3.poolmanager.PoolManager, "urlopen"),
    (httpx.Client, "send"),
    (httpx.AsyncClient, "send"),
    (aiohttp.ClientSession, "_request"),
    (http.client.HTTPConnection, "request"),
    (http.client.HTTPConnection, "getresponse"),
    (http.client.HTTPConnection, "close"),
]
ORIGINALS = {(owner, name): owner.__dict__[name] for owner, name in PATCHED}

by_client = pytest.mark.parametrize("client", CLIENTS, ids=lambda client: client.id)


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with instrumented() as trace:
        yield trace


@pytest.fixture(name="server")
def _server() -> Iterator[Server]:
    with running_server() as server:
        yield server


@by_client
def test_a_request_is_one_invocation_under_its_caller_that_hands_off_to_the_server(
    client: Client, server: Server, trace: Capture
) -> None:
    assert client.traced(server.url("/ok"), {"X-Caller": "kept"}) == 200
    received = server.next()
    [caller], [sent] = callers_and_clients(trace)
    assert sent.name == name(client.library, server, "/ok")
    assert (sent.parent, sent.seq, sent.status) == (caller.iid, caller.seq, "ok")
    assert http_attributes(sent) == {URL: server.url("/ok"), STATUS: 200}
    assert caller.start_ns <= sent.start_ns <= (sent.end_ns or 0) <= (caller.end_ns or 0)
    assert handed_off_by(trace, received.one("traceparent")) == (caller.seq, sent.iid)
    assert received.one("tracestate").startswith("invoseq=")
    assert received.one("x-caller") == "kept"
    server.nothing_more()


@by_client
def test_a_traceparent_the_caller_set_is_kept(
    client: Client, server: Server, trace: Capture
) -> None:
    client.traced(server.url("/ok"), {"TraceParent": FOREIGN, "X-Caller": "kept"})
    received = server.next()
    assert received.headers["traceparent"] == [FOREIGN]
    assert "tracestate" not in received.headers
    assert received.one("x-caller") == "kept"
    [caller], [sent] = callers_and_clients(trace)
    assert (sent.name, sent.parent) == (name(client.library, server, "/ok"), caller.iid)


@by_client
def test_a_5xx_response_marks_the_invocation_an_error(
    client: Client, server: Server, trace: Capture
) -> None:
    assert client.traced(server.url("/fail")) == 500
    server.next()
    [caller], [sent] = callers_and_clients(trace)
    assert (sent.status, sent.error, caller.status) == ("error", "HTTP 500", "ok")
    assert http_attributes(sent) == {URL: server.url("/fail"), STATUS: 500, ERROR_TYPE: "HTTP 500"}


@by_client
def test_a_refused_connection_marks_an_error_and_reaches_the_caller_unchanged(
    client: Client,
) -> None:
    with refusing_port() as port:
        url = f"http://127.0.0.1:{port}/ok"
        with pytest.raises(client.raises) as plain:
            client.untraced(url)
        with instrumented() as trace:
            with pytest.raises(client.raises) as raised:
                client.traced(url)
            [caller], [sent] = callers_and_clients(trace)
    assert type(raised.value) is type(plain.value)
    assert (caller.status, caller.error) == ("error", type(raised.value).__name__)
    error = client.refused or type(raised.value).__name__
    assert (sent.name, sent.parent) == (f"{client.library}.GET 127.0.0.1:{port}/ok", caller.iid)
    assert (sent.status, sent.error) == ("error", error)
    assert http_attributes(sent) == {URL: url, ERROR_TYPE: error}


@by_client
def test_a_request_outside_any_traced_call_starts_its_own_sequence(
    client: Client, server: Server, trace: Capture
) -> None:
    assert client.untraced(server.url("/ok")) == 200
    received = server.next()
    [sent] = trace.invocations()
    assert (sent.name, sent.parent, sent.status) == (name(client.library, server, "/ok"), 0, "ok")
    assert handed_off_by(trace, received.one("traceparent")) == (sent.seq, sent.iid)


@pytest.mark.parametrize("client", FOLLOWING, ids=lambda client: client.id)
def test_a_redirect_followed_inside_the_library_is_one_invocation_with_the_final_status(
    client: Client, server: Server, trace: Capture
) -> None:
    assert client.traced(server.url("/redirect")) == 200
    first, second = server.next(), server.next()
    assert (first.path, second.path) == ("/redirect", "/ok")
    [caller], [sent] = callers_and_clients(trace)
    assert (sent.name, sent.parent) == (name(client.library, server, "/redirect"), caller.iid)
    assert http_attributes(sent)[STATUS] == 200
    assert handed_off_by(trace, first.one("traceparent")) == (caller.seq, sent.iid)
    assert handed_off_by(trace, second.one("traceparent")) == (caller.seq, sent.iid)


@pytest.mark.parametrize("client", FOLLOWING, ids=lambda client: client.id)
def test_each_hop_of_a_redirect_waits_from_its_own_send(
    client: Client, server: Server, trace: Capture
) -> None:
    assert client.traced(server.url("/redirect")) == 200
    first, second = server.next(), server.next()
    trace.invocations()  # flushes
    sent = handoffs(trace)
    hops = [sent[parent_hid(r.one("traceparent"))] for r in (first, second)]
    assert hops[0].hid != hops[1].hid  # two hand-offs, one per request on the wire
    assert hops[0].t_ns <= first.at_ns  # each written before its own request left
    assert first.at_ns <= hops[1].t_ns <= second.at_ns  # the second after the first arrived


def test_urllib_request_follows_a_redirect_on_a_new_connection_so_as_a_second_invocation(
    server: Server, trace: Capture
) -> None:
    assert call(via_urllib, server.url("/redirect"), {}) == 200
    first, second = server.next(), server.next()
    [caller], [hop, final] = callers_and_clients(trace)
    assert (hop.name, hop.parent) == (name("http.client", server, "/redirect"), caller.iid)
    assert (final.name, final.parent) == (name("http.client", server, "/ok"), caller.iid)
    assert hop.status == final.status == "ok"
    assert http_attributes(hop)[STATUS] == 302
    assert http_attributes(final)[STATUS] == 200
    assert handed_off_by(trace, first.one("traceparent")) == (caller.seq, hop.iid)
    assert handed_off_by(trace, second.one("traceparent")) == (caller.seq, final.iid)


def test_requests_through_urllib3_and_http_client_is_one_invocation(
    server: Server, trace: Capture
) -> None:
    assert all(owner.__dict__[n] is not ORIGINALS[owner, n] for owner, n in PATCHED)
    assert call(via_requests, server.url("/ok"), {}) == 200
    received = server.next()
    [caller], [sent] = callers_and_clients(trace)
    assert (sent.name, sent.parent) == (name("requests", server, "/ok"), caller.iid)
    assert len(received.headers["traceparent"]) == 1
    assert handed_off_by(trace, received.one("traceparent")) == (caller.seq, sent.iid)


def test_requests_switched_off_by_name_is_measured_by_urllib3_below_it(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISABLED_ENV, "requests")
    with instrumented() as trace:
        assert requests.Session.__dict__["send"] is ORIGINALS[requests.Session, "send"]
        call(via_requests, server.url("/ok"), {})
        received = server.next()
        [caller], [sent] = callers_and_clients(trace)
    assert (sent.name, sent.parent) == (name("urllib3", server, "/ok"), caller.iid)
    assert handed_off_by(trace, received.one("traceparent")) == (caller.seq, sent.iid)


def test_requests_with_every_library_below_it_switched_off_is_not_measured(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISABLED_ENV, "requests,urllib3,http_client")
    with instrumented() as trace:
        call(via_requests, server.url("/ok"), {})
        received = server.next()
        [_], others = callers_and_clients(trace)
    assert others == []
    assert "traceparent" not in received.headers


def test_instrumenting_twice_patches_once_and_uninstrument_restores_every_attribute(
    server: Server,
) -> None:
    with capture() as trace:
        tracer.instrument()
        tracer.instrument()
        try:
            for owner, attribute in PATCHED:
                replacement = owner.__dict__[attribute]
                assert replacement is not ORIGINALS[owner, attribute]
                assert replacement.__wrapped__ is ORIGINALS[owner, attribute]
            call(via_requests, server.url("/ok"), {})
            server.next()
            [_], [sent] = callers_and_clients(trace)
            assert sent.name == name("requests", server, "/ok")
        finally:
            tracer.uninstrument()
    changed = [(o, n) for o, n in PATCHED if o.__dict__[n] is not ORIGINALS[o, n]]
    assert changed == []

"""The gRPC integrations with ``grpc`` (sync) against a real in-process server: each call is one
client invocation under its caller, handing off in its metadata to the server's invocation, whose
handler (run on the server's thread pool) is a traced child with its exact parent; unary and each
streaming kind, ``future()`` and ``with_call``, insecure and secure channels; errors and
cancellation; the caller's metadata kept; a call outside any sequence starts one; a server started
inside a sequence serves each call in its own. (As patches: ``test_grpc_patching``.)"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from invoseq import wire
from tests.queues.grpc_support import (
    FOREIGN,
    HANDLERS,
    HELD,
    TIMEOUT_S,
    Pricing,
    caller,
    client_attributes,
    handed_off_by,
    instrumented,
    method,
    named,
    quote,
    requests_of,
    rpc_attributes,
    server_attributes,
    sync_server,
    wait_ended,
)
from tracer._core import recorder
from tracer._patching.integrations import DISABLED_ENV
from tracer.testing import Capture, CapturedInvocation

MODULE = "tests.queues.grpc_support."


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with instrumented() as trace:
        yield trace


@pytest.fixture(name="service")
def _service() -> Pricing:
    return Pricing()


@pytest.fixture(name="port")
def _port(trace: Capture, service: Pricing) -> Iterator[int]:
    with sync_server(service) as port:  # created while instrumented
        yield port


@pytest.fixture(name="channel")
def _channel(port: int) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield channel


def test_a_unary_call_is_a_client_invocation_the_servers_invocation_continues(
    trace: Capture, service: Pricing, channel: grpc.Channel, port: int
) -> None:
    assert caller(quote, channel, b"apple", [("x-caller", "kept")]) == b"15"
    assert trace.trees(strip=MODULE) == [
        {
            "name": "caller",
            "children": [
                {
                    "name": "grpc.client /shop.Pricing/Quote",
                    "children": [
                        {
                            "name": "grpc.server /shop.Pricing/Quote",
                            "handoff": "remote",
                            "children": [
                                {
                                    "name": "Pricing.quote",
                                    "children": [{"name": "price_of"}],
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    ]
    first, sent, served, handler, _ = trace.invocations()
    assert rpc_attributes(sent) == client_attributes("Quote", port, 0)
    assert rpc_attributes(served) == server_attributes("Quote", 0)
    assert served.thread_name.startswith("grpc-pool")
    assert handler.tid == served.tid
    assert first.seq == sent.seq == served.seq == handler.seq
    seen = service.next_seen()
    assert seen.metadata["x-caller"] == "kept"
    assert handed_off_by(trace, seen.metadata["traceparent"]) == (sent.seq, sent.iid)
    assert seen.metadata["tracestate"].startswith("invoseq=")
    assert seen.seq == sent.seq


def list_prices(channel: grpc.Channel) -> list[bytes]:
    return list(channel.unary_stream(method("List"))(b"pear", timeout=TIMEOUT_S))


def total(channel: grpc.Channel) -> bytes:
    response: bytes = channel.stream_unary(method("Total"))(
        requests_of(b"a", b"bb"), timeout=TIMEOUT_S
    )
    return response


def chat(channel: grpc.Channel) -> list[bytes]:
    return list(channel.stream_stream(method("Chat"))(requests_of(b"a", b"bb"), timeout=TIMEOUT_S))


#: (method, the call, its answer, the prices its handler computes, the client's own children)
STREAMING = [
    ("List", list_prices, [b"12", b"13", b"14"], 3, []),
    ("Total", total, b"9", 2, ["requests_of"]),
    ("Chat", chat, [b"3", b"6"], 2, ["requests_of"]),
]


@pytest.mark.parametrize("case", STREAMING, ids=["unary_stream", "stream_unary", "stream_stream"])
def test_a_streaming_call_is_one_invocation_on_each_side_ending_with_the_call(
    trace: Capture, channel: grpc.Channel, port: int, case: tuple[Any, ...]
) -> None:
    name, call, expected, prices, client_children = case
    assert caller(call, channel) == expected
    [root] = trace.trees(strip=MODULE)
    [sent] = root["children"]
    assert sent["name"] == f"grpc.client /shop.Pricing/{name}"
    [served] = [c for c in sent["children"] if c["name"].startswith("grpc.server")]
    requests = [c for c in sent["children"] if c is not served]
    # The request generator is stepped with the client's call attached, in gRPC's own thread.
    assert requests == [{"name": n} for n in client_children]
    assert served == {
        "name": f"grpc.server /shop.Pricing/{name}",
        "handoff": "remote",
        "children": [
            {
                "name": f"Pricing.{HANDLERS[name]}",
                "children": [{"name": "price_of"}] * prices,
            }
        ],
    }
    [client] = named(trace, f"grpc.client /shop.Pricing/{name}")
    [server] = named(trace, f"grpc.server /shop.Pricing/{name}")
    [handler] = named(trace, f"{MODULE}Pricing.{HANDLERS[name]}")
    assert rpc_attributes(client) == client_attributes(name, port, 0)
    assert rpc_attributes(server) == server_attributes(name, 0)
    assert (handler.parent, handler.tid) == (server.iid, server.tid)
    assert server.thread_name.startswith("grpc-pool")
    # The server's call ends once its responses ran out, the client's once it read the last.
    assert (handler.end_ns or 0) <= (server.end_ns or 0) <= (client.end_ns or 0)


def test_future_and_with_call_are_one_invocation_each(
    trace: Capture, channel: grpc.Channel, port: int
) -> None:
    multi = channel.unary_unary(method("Quote"))

    def both() -> tuple[bytes, bytes, grpc.StatusCode]:
        future = multi.future(b"fig", timeout=TIMEOUT_S)
        response, call = multi.with_call(b"kiwi", timeout=TIMEOUT_S)
        return future.result(TIMEOUT_S), response, call.code()

    assert caller(both) == (b"9", b"12", grpc.StatusCode.OK)
    # The future's invocation ends in its done callback, in gRPC's thread: wait for it.
    [future, with_call] = wait_ended(trace, "grpc.client /shop.Pricing/Quote", 2)
    [root] = named(trace, MODULE + "caller")
    assert future.parent == with_call.parent == root.iid
    assert future.status == with_call.status == "ok"
    assert (
        rpc_attributes(future) == rpc_attributes(with_call) == client_attributes("Quote", port, 0)
    )
    servers = named(trace, "grpc.server /shop.Pricing/Quote")
    assert sorted(s.parent for s in servers) == sorted([future.iid, with_call.iid])


def _stalled(rpc: Any) -> list[Any]:
    """The done callbacks of ``rpc`` (a call in flight), taken out of it: as if gRPC's polling
    thread, which runs them once the call's status came, had not been scheduled yet."""
    with rpc._state.condition:
        callbacks = list(rpc._state.callbacks)
        rpc._state.callbacks.clear()
    return callbacks


def _ends(trace: Capture, invocation: CapturedInvocation) -> int:
    """How many end events the tracer sent for ``invocation``."""
    return sum(
        isinstance(event, wire.End | wire.Error) and event.iid == invocation.iid
        for batch in trace.batches
        for chunk in batch.chunks
        for event in chunk.events
    )


def test_a_call_read_to_its_end_has_ended_when_the_read_returns(
    trace: Capture, channel: grpc.Channel, port: int
) -> None:
    # gRPC runs a call's done callbacks in its polling thread after waking the reader: a program
    # that reads a stream's last message (or a future's result) and exits at once must not lose
    # the call's end. The callbacks are held back here until after the reads.
    chat_requests: queue.Queue[bytes | None] = queue.Queue()
    total_requests: queue.Queue[bytes | None] = queue.Queue()
    responses = channel.stream_stream(method("Chat"))(
        iter(chat_requests.get, None), timeout=TIMEOUT_S
    )
    future = channel.stream_unary(method("Total")).future(
        iter(total_requests.get, None), timeout=TIMEOUT_S
    )
    late = _stalled(responses) + _stalled(future)
    errors = recorder.internal_errors()
    for requests in (chat_requests, total_requests):
        requests.put(b"pear")
        requests.put(None)
    assert list(responses) == [b"12"]
    assert future.result(TIMEOUT_S) == b"12"
    calls = [named(trace, f"grpc.client /shop.Pricing/{name}") for name in ("Chat", "Total")]
    for [call], name in zip(calls, ("Chat", "Total"), strict=True):
        assert call.status == "ok"
        assert rpc_attributes(call) == client_attributes(name, port, 0)
    for callback in late:  # the polling thread's turn comes: the calls had ended already
        callback()
    assert [_ends(trace, call) for [call] in calls] == [1, 1]
    assert recorder.internal_errors() == errors
    # What the program holds is still gRPC's call object, as it was.
    assert isinstance(responses, grpc.Call)
    assert isinstance(future, grpc.Future)
    assert type(responses).__name__ == "_MultiThreadedRendezvous"
    assert responses.code() == future.code() == grpc.StatusCode.OK


def test_handlers_on_the_servers_thread_pool_keep_their_exact_parent(
    trace: Capture, channel: grpc.Channel
) -> None:
    """``HELD`` calls at once, each from a caller of its own: each handler, on its own thread of
    the pool, is the child of its own call's invocation, and its work the child of it."""
    hold = channel.unary_unary(method("Hold"))
    items = [b"a" * n for n in range(1, HELD + 1)]
    with ThreadPoolExecutor(HELD) as callers:
        answers = list(callers.map(lambda item: caller(hold, item, TIMEOUT_S), items))
    assert answers == [str(3 * n).encode() for n in range(1, HELD + 1)]
    servers = named(trace, "grpc.server /shop.Pricing/Hold")
    handlers = named(trace, MODULE + "Pricing.hold")
    clients = named(trace, "grpc.client /shop.Pricing/Hold")
    assert len(servers) == len(handlers) == len(clients) == HELD
    assert len({s.seq for s in servers}) == HELD
    assert len({s.thread_name for s in servers}) == HELD  # held together: one pool thread each
    by_iid = {s.iid: s for s in servers}
    for handler in handlers:
        server = by_iid[handler.parent]
        assert (handler.seq, handler.tid) == (server.seq, server.tid)
        [client] = [c for c in clients if c.iid == server.parent]
        assert client.seq == server.seq
    prices = named(trace, MODULE + "price_of")
    assert sorted(p.parent for p in prices) == sorted(h.iid for h in handlers)


def test_an_abort_and_an_exception_are_errors_and_reach_the_caller_unchanged(
    trace: Capture, channel: grpc.Channel, port: int
) -> None:
    with pytest.raises(grpc.RpcError) as missing:
        caller(quote, channel, b"missing")
    with pytest.raises(grpc.RpcError) as boom:
        caller(quote, channel, b"boom")
    assert (missing.value.code(), missing.value.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "no such item",
    )
    assert boom.value.code() == grpc.StatusCode.UNKNOWN
    first, second = named(trace, "grpc.client /shop.Pricing/Quote")
    served_first, served_second = named(trace, "grpc.server /shop.Pricing/Quote")
    assert (first.error, served_first.error) == ("gRPC NOT_FOUND", "gRPC NOT_FOUND")
    assert rpc_attributes(first) == client_attributes("Quote", port, 5, error_type="gRPC NOT_FOUND")
    assert rpc_attributes(served_first) == server_attributes(
        "Quote", 5, error_type="gRPC NOT_FOUND"
    )
    assert (second.error, served_second.error) == ("gRPC UNKNOWN", "LookupError")
    assert rpc_attributes(served_second) == server_attributes("Quote", 2, error_type="LookupError")
    callers = named(trace, MODULE + "caller")
    assert [c.error for c in callers] == ["_InactiveRpcError", "_InactiveRpcError"]


def test_a_stream_that_fails_midway_is_an_error_on_both_sides(
    trace: Capture, channel: grpc.Channel
) -> None:
    received: list[bytes] = []

    def read() -> None:
        received.extend(channel.unary_stream(method("List"))(b"boom", timeout=TIMEOUT_S))

    with pytest.raises(grpc.RpcError) as raised:
        caller(read)
    assert raised.value.code() == grpc.StatusCode.UNKNOWN
    assert received == [b"12"]
    [client] = named(trace, "grpc.client /shop.Pricing/List")
    [server] = named(trace, "grpc.server /shop.Pricing/List")
    [handler] = named(trace, MODULE + "Pricing.prices")
    assert (client.error, server.error, handler.error) == (
        "gRPC UNKNOWN",
        "LookupError",
        "LookupError",
    )


def test_a_stream_the_client_cancels_ends_cancelled_on_both_sides(
    trace: Capture, channel: grpc.Channel
) -> None:
    def first_then_cancel() -> bytes:
        responses = channel.unary_stream(method("List"))(b"many", timeout=TIMEOUT_S)
        first: bytes = next(responses)
        responses.cancel()
        return first

    assert caller(first_then_cancel) == b"12"
    [client] = wait_ended(trace, "grpc.client /shop.Pricing/List")
    [server] = wait_ended(trace, "grpc.server /shop.Pricing/List")
    assert (client.error, server.error) == ("gRPC CANCELLED", "gRPC CANCELLED")
    assert rpc_attributes(server)["rpc.grpc.status_code"] == 1
    [handler] = wait_ended(trace, MODULE + "Pricing.prices")
    assert handler.parent == server.iid
    assert len(named(trace, MODULE + "price_of")) < 1000  # the handler's generator was closed


def test_a_secure_channel_is_measured_too(trace: Capture, service: Pricing) -> None:
    with (
        sync_server(service, grpc.local_server_credentials()) as port,
        grpc.secure_channel(f"127.0.0.1:{port}", grpc.local_channel_credentials()) as channel,
    ):
        assert caller(quote, channel, b"apple") == b"15"
    [client] = named(trace, "grpc.client /shop.Pricing/Quote")
    [server] = named(trace, "grpc.server /shop.Pricing/Quote")
    assert (server.parent, server.seq) == (client.iid, client.seq)
    assert rpc_attributes(client) == client_attributes("Quote", port, 0)


def test_a_traceparent_the_caller_passed_is_kept(
    trace: Capture, service: Pricing, channel: grpc.Channel
) -> None:
    caller(quote, channel, b"apple", (("traceparent", FOREIGN), ("x-caller", "kept")))
    seen = service.next_seen()
    assert (seen.metadata["traceparent"], seen.metadata["x-caller"]) == (FOREIGN, "kept")
    assert "tracestate" not in seen.metadata
    [client] = named(trace, "grpc.client /shop.Pricing/Quote")
    [server] = named(trace, "grpc.server /shop.Pricing/Quote")
    assert client.parent != 0  # under its caller, all the same
    assert server.seq == FOREIGN.split("-")[1]


def test_a_call_outside_any_sequence_starts_one_the_server_continues(
    trace: Capture, service: Pricing, channel: grpc.Channel
) -> None:
    assert quote(channel, b"apple") == b"15"
    [client] = named(trace, "grpc.client /shop.Pricing/Quote")
    [server] = named(trace, "grpc.server /shop.Pricing/Quote")
    assert (client.parent, server.parent, server.seq) == (0, client.iid, client.seq)
    assert handed_off_by(trace, service.next_seen().metadata["traceparent"]) == (
        client.seq,
        client.iid,
    )


def test_a_server_started_in_a_sequence_serves_each_call_in_a_sequence_of_its_own(
    service: Pricing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serving thread starts with no sequence: a call that brings no traceparent (the client
    side is off) starts a sequence of its own, and nothing of the server hangs under the traced
    call that started it."""
    monkeypatch.setenv(DISABLED_ENV, "grpc_client")
    server = sync_server(service)
    with instrumented() as trace:
        port = caller(server.__enter__)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                assert quote(channel, b"apple") == b"15"
        finally:
            server.__exit__(None, None, None)
        assert trace.trees(strip=MODULE) == [
            {"name": "caller"},
            {
                "name": "grpc.server /shop.Pricing/Quote",
                "children": [{"name": "Pricing.quote", "children": [{"name": "price_of"}]}],
            },
        ]
    assert "traceparent" not in service.next_seen().metadata

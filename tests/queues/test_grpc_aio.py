"""The gRPC integrations with ``grpc.aio`` against a real in-process server on a loop in a thread of
its own: each call is one client invocation under its caller (through the task gRPC runs the
interceptors in), handing off in its metadata to the server's invocation, whose handler
(coroutine, async generator, or a sync handler in the server's thread pool) is a traced child with
its exact parent; unary and each streaming kind; errors; the caller's metadata kept; calls at once
each in their own tree; a server started inside a sequence serves each call in its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest

from tests.queues.grpc_support import (
    TIMEOUT_S,
    AioPricing,
    AioServer,
    client_attributes,
    handed_off_by,
    instrumented,
    method,
    named,
    price_of,
    rpc_attributes,
    server_attributes,
)
from tracer import traced
from tracer._patching.integrations import DISABLED_ENV
from tracer.testing import Capture

T = TypeVar("T")
MODULE = "tests.queues.grpc_support."
HERE = __name__ + "."
Work = Callable[[grpc.aio.Channel], Awaitable[Any]]


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with instrumented() as trace:
        yield trace


@pytest.fixture(name="service")
def _service() -> AioPricing:
    return AioPricing()


@pytest.fixture(name="port")
def _port(trace: Capture, service: AioPricing) -> Iterator[int]:
    server = AioServer(service)  # created while instrumented
    try:
        yield server.port
    finally:
        server.stop()


@traced
async def caller(port: int, work: Work) -> Any:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        return await work(channel)


def run(port: int, work: Work) -> Any:
    """``work`` with a channel to the server, inside the traced ``caller``, on a loop of its own."""
    return asyncio.run(asyncio.wait_for(caller(port, work), TIMEOUT_S))


@traced
async def requests_of(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


@traced
async def start(starting: Awaitable[T]) -> T:
    return await starting


def quote(item: bytes, metadata: Any = None, name: str = "Quote") -> Work:
    async def work(channel: grpc.aio.Channel) -> bytes:
        response: bytes = await channel.unary_unary(method(name))(
            item, metadata=metadata, timeout=TIMEOUT_S
        )
        return response

    return work


async def list_prices(channel: grpc.aio.Channel) -> list[bytes]:
    return [r async for r in channel.unary_stream(method("List"))(b"pear", timeout=TIMEOUT_S)]


async def total(channel: grpc.aio.Channel) -> bytes:
    call = channel.stream_unary(method("Total"))(requests_of(b"a", b"bb"), timeout=TIMEOUT_S)
    response: bytes = await call
    return response


async def chat(channel: grpc.aio.Channel) -> list[bytes]:
    call = channel.stream_stream(method("Chat"))(requests_of(b"a", b"bb"), timeout=TIMEOUT_S)
    return [r async for r in call]


def test_a_unary_call_is_a_client_invocation_the_servers_invocation_continues(
    trace: Capture, service: AioPricing, port: int
) -> None:
    assert run(port, quote(b"apple", (("x-caller", "kept"),))) == b"15"
    assert trace.trees(strip=HERE) == [
        {
            "name": "caller",
            "children": [
                {
                    "name": "grpc.client /shop.Pricing/Quote",
                    "handoff": "task",  # grpc.aio runs the interceptors in a task of the call
                    "children": [
                        {
                            "name": "grpc.server /shop.Pricing/Quote",
                            "handoff": "remote",
                            "children": [
                                {
                                    "name": MODULE + "AioPricing.quote",
                                    "children": [{"name": MODULE + "price_of"}],
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    ]
    _, sent, served, handler, _ = trace.invocations()
    assert rpc_attributes(sent) == client_attributes("Quote", port, 0)
    assert rpc_attributes(served) == server_attributes("Quote", 0)
    assert served.thread_name == handler.thread_name == "test-grpc-aio"
    seen = service.next_seen()
    assert seen.metadata["x-caller"] == "kept"
    assert handed_off_by(trace, seen.metadata["traceparent"]) == (sent.seq, sent.iid)
    assert seen.seq == sent.seq


#: (method, the call, its answer, the prices its handler computes, the client's own children)
STREAMING = [
    ("List", list_prices, [b"12", b"13", b"14"], 3, []),
    ("Total", total, b"9", 2, ["requests_of"]),
    ("Chat", chat, [b"3", b"6"], 2, ["requests_of"]),
]
HANDLERS = {"List": "prices", "Total": "total", "Chat": "chat"}


@pytest.mark.parametrize("case", STREAMING, ids=["unary_stream", "stream_unary", "stream_stream"])
def test_a_streaming_call_is_one_invocation_on_each_side_ending_with_the_call(
    trace: Capture, port: int, case: tuple[Any, ...]
) -> None:
    name, call, expected, prices, client_children = case
    assert run(port, call) == expected
    [root] = trace.trees(strip=HERE)
    [sent] = root["children"]
    assert sent["name"] == f"grpc.client /shop.Pricing/{name}"
    [served] = [c for c in sent["children"] if c["name"].startswith("grpc.server")]
    # The request generator is stepped with the client's call attached, in gRPC's own task.
    assert [c for c in sent["children"] if c is not served] == [
        {"name": n} for n in client_children
    ]
    assert served == {
        "name": f"grpc.server /shop.Pricing/{name}",
        "handoff": "remote",
        "children": [
            {
                "name": f"{MODULE}AioPricing.{HANDLERS[name]}",
                "children": [{"name": MODULE + "price_of"}] * prices,
            }
        ],
    }
    [client] = named(trace, f"grpc.client /shop.Pricing/{name}")
    [server] = named(trace, f"grpc.server /shop.Pricing/{name}")
    assert rpc_attributes(client) == client_attributes(name, port, 0)
    assert rpc_attributes(server) == server_attributes(name, 0)
    assert (server.end_ns or 0) <= (client.end_ns or 0)


def test_a_sync_handler_in_the_servers_thread_pool_keeps_its_exact_parent(
    trace: Capture, port: int
) -> None:
    assert run(port, quote(b"plum", name="SyncQuote")) == b"12"
    [server] = named(trace, "grpc.server /shop.Pricing/SyncQuote")
    [handler] = named(trace, MODULE + "AioPricing.sync_quote")
    [work] = named(trace, MODULE + "price_of")
    assert (handler.parent, work.parent) == (server.iid, handler.iid)
    assert handler.thread_name.startswith("grpc-aio-pool")
    assert rpc_attributes(server) == server_attributes("SyncQuote", 0)


def test_an_abort_and_an_exception_are_errors_and_reach_the_caller_unchanged(
    trace: Capture, port: int
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        run(port, quote(b"missing"))
    with pytest.raises(grpc.aio.AioRpcError) as boom:
        run(port, quote(b"boom"))
    assert (missing.value.code(), missing.value.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "no such item",
    )
    assert boom.value.code() == grpc.StatusCode.UNKNOWN
    first, second = named(trace, "grpc.client /shop.Pricing/Quote")
    served_first, served_second = named(trace, "grpc.server /shop.Pricing/Quote")
    assert rpc_attributes(first) == client_attributes("Quote", port, 5, error_type="gRPC NOT_FOUND")
    assert rpc_attributes(served_first) == server_attributes(
        "Quote", 5, error_type="gRPC NOT_FOUND"
    )
    assert (second.error, served_second.error) == ("gRPC UNKNOWN", "LookupError")
    assert rpc_attributes(served_second) == server_attributes("Quote", 2, error_type="LookupError")


def test_calls_at_once_are_each_in_the_tree_of_their_own_caller(trace: Capture, port: int) -> None:
    items = [b"a" * n for n in range(1, 5)]

    async def at_once() -> list[Any]:
        return await asyncio.gather(*(caller(port, quote(item)) for item in items))

    assert asyncio.run(asyncio.wait_for(at_once(), TIMEOUT_S)) == [
        str(price_of(item)).encode() for item in items
    ]
    callers = named(trace, HERE + "caller")
    clients = named(trace, "grpc.client /shop.Pricing/Quote")
    servers = named(trace, "grpc.server /shop.Pricing/Quote")
    handlers = named(trace, MODULE + "AioPricing.quote")
    assert len(callers) == len(clients) == len(servers) == len(handlers) == len(items)
    assert len({c.seq for c in callers}) == len(items)
    by_iid = {i.iid: i for i in (*callers, *clients, *servers)}
    for handler in handlers:
        server = by_iid[handler.parent]
        client = by_iid[server.parent]
        assert by_iid[client.parent].seq == client.seq == server.seq == handler.seq


def test_a_server_started_in_a_sequence_serves_each_call_in_a_sequence_of_its_own(
    service: AioPricing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's tasks start with no sequence: a call that brings no traceparent (the client
    side is off) starts a sequence of its own, and nothing of the server hangs under the traced
    coroutine that started it."""
    monkeypatch.setenv(DISABLED_ENV, "grpc_client")
    with instrumented() as trace:
        server = AioServer(service, start)
        try:
            assert run(server.port, quote(b"apple")) == b"15"
        finally:
            server.stop()
        assert trace.trees(strip=HERE) == [
            {"name": "start"},
            {"name": "caller"},
            {
                "name": "grpc.server /shop.Pricing/Quote",
                "children": [
                    {
                        "name": MODULE + "AioPricing.quote",
                        "children": [{"name": MODULE + "price_of"}],
                    }
                ],
            },
        ]
    assert "traceparent" not in service.next_seen().metadata

"""What the gRPC tests share: a small service, ``shop.Pricing`` (bytes in and out, no generated
code), with a method of each kind, served in-process by a real server on 127.0.0.1 (``grpc``: a
``ThreadPoolExecutor``; ``grpc.aio``: an event loop in a thread of its own), what its handlers
saw, and the hand-offs a trace holds."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio

import tracer
from invoseq import wire
from tracer import traced
from tracer._core import context
from tracer._core.ids import as_hid
from tracer.propagation import parse_traceparent
from tracer.testing import Capture, CapturedInvocation, capture

T = TypeVar("T")
TIMEOUT_S = 10.0
SERVICE = "shop.Pricing"
#: A traceparent the caller sets itself.
FOREIGN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#: How many calls ``Hold`` keeps waiting for each other (the sync server's pool has 4 threads).
HELD = 4


@traced
def price_of(item: bytes) -> int:
    return len(item) * 3


@dataclass(frozen=True)
class Seen:
    """What a handler saw: the call's metadata (the last value of each key), the sequence it ran
    in and its thread."""

    metadata: dict[str, Any]
    seq: str | None
    thread: str


class Pricing:
    """The service's sync handlers (``HANDLERS`` names the methods they serve). ``quote``
    answers ``b"missing"`` with ``abort(NOT_FOUND)`` and raises on ``b"boom"``; ``hold`` returns
    once ``HELD`` calls are in it; ``prices`` streams 3 prices (1000, slowly, for ``b"many"``;
    raising after the first for ``b"boom"``)."""

    def __init__(self) -> None:
        self.seen: queue.Queue[Seen] = queue.Queue()
        self.held = threading.Barrier(HELD)

    def note(self, servicer: Any) -> None:
        metadata = dict(servicer.invocation_metadata())
        self.seen.put(Seen(metadata, context.current_sequence(), threading.current_thread().name))

    def next_seen(self) -> Seen:
        return self.seen.get(timeout=TIMEOUT_S)

    def quote(self, request: bytes, servicer: Any) -> bytes:
        self.note(servicer)
        if request == b"missing":
            servicer.abort(grpc.StatusCode.NOT_FOUND, "no such item")
        if request == b"boom":
            raise LookupError("no price")
        return str(price_of(request)).encode()

    def hold(self, request: bytes, servicer: Any) -> bytes:
        self.note(servicer)
        self.held.wait(TIMEOUT_S)
        return str(price_of(request)).encode()

    def prices(self, request: bytes, servicer: Any) -> Iterator[bytes]:
        self.note(servicer)
        count = 1000 if request == b"many" else 3
        for n in range(count):
            if request == b"boom" and n:
                raise LookupError("no more prices")
            yield str(price_of(request) + n).encode()
            if request == b"many":
                time.sleep(0.01)

    def total(self, requests: Iterator[bytes], servicer: Any) -> bytes:
        self.note(servicer)
        return str(sum(price_of(item) for item in requests)).encode()

    def chat(self, requests: Iterator[bytes], servicer: Any) -> Iterator[bytes]:
        self.note(servicer)
        for item in requests:
            yield str(price_of(item)).encode()


class AioPricing(Pricing):
    """The same service with ``grpc.aio`` handlers (coroutines, async generators); ``sync_quote``
    (method ``SyncQuote``) is a sync handler, which an aio server runs in its thread pool."""

    async def quote(self, request: bytes, servicer: Any) -> bytes:  # type: ignore[override]
        self.note(servicer)
        if request == b"missing":
            await servicer.abort(grpc.StatusCode.NOT_FOUND, "no such item")
        if request == b"boom":
            raise LookupError("no price")
        return str(price_of(request)).encode()

    async def prices(self, request: bytes, servicer: Any) -> AsyncIterator[bytes]:  # type: ignore[override]
        self.note(servicer)
        for n in range(3):
            yield str(price_of(request) + n).encode()

    async def total(self, requests: AsyncIterator[bytes], servicer: Any) -> bytes:  # type: ignore[override]
        self.note(servicer)
        return str(sum([price_of(item) async for item in requests])).encode()

    async def chat(self, requests: AsyncIterator[bytes], servicer: Any) -> AsyncIterator[bytes]:  # type: ignore[override]
        self.note(servicer)
        async for item in requests:
            yield str(price_of(item)).encode()

    def sync_quote(self, request: bytes, servicer: Any) -> bytes:
        self.note(servicer)
        return str(price_of(request)).encode()


def handlers(service: Pricing) -> Any:
    methods = {
        "Quote": grpc.unary_unary_rpc_method_handler(service.quote),
        "Hold": grpc.unary_unary_rpc_method_handler(service.hold),
        "List": grpc.unary_stream_rpc_method_handler(service.prices),
        "Total": grpc.stream_unary_rpc_method_handler(service.total),
        "Chat": grpc.stream_stream_rpc_method_handler(service.chat),
    }
    if isinstance(service, AioPricing):
        methods["SyncQuote"] = grpc.unary_unary_rpc_method_handler(service.sync_quote)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


#: The handler serving each method.
HANDLERS = {
    "Quote": "quote",
    "Hold": "hold",
    "List": "prices",
    "Total": "total",
    "Chat": "chat",
    "SyncQuote": "sync_quote",
}


def method(name: str) -> str:
    return f"/{SERVICE}/{name}"


@traced
def caller(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` inside a traced call (of this module: ``strip`` it off names)."""
    return work(*args)


@traced
def requests_of(*items: bytes) -> Iterator[bytes]:
    """A streamed request, a traced generator."""
    yield from items


def quote(channel: grpc.Channel, item: bytes, metadata: Any = None) -> bytes:
    """A unary call of ``Quote`` on a sync channel."""
    response: bytes = channel.unary_unary(method("Quote"))(
        item, metadata=metadata, timeout=TIMEOUT_S
    )
    return response


@contextmanager
def sync_server(service: Pricing, credentials: Any = None) -> Iterator[int]:
    """A ``grpc`` server of ``service`` on a free port of 127.0.0.1 (yielded; a secure port with
    ``credentials``), its handlers in a pool of 4 threads named ``grpc-pool_N``; stopped, and its
    pool shut down, afterwards."""
    pool = ThreadPoolExecutor(HELD, thread_name_prefix="grpc-pool")
    server = grpc.server(pool)
    try:
        server.add_generic_rpc_handlers((handlers(service),))
        if credentials is None:
            port = server.add_insecure_port("127.0.0.1:0")
        else:
            port = server.add_secure_port("127.0.0.1:0", credentials)
        server.start()
        yield port
    finally:
        assert server.stop(None).wait(TIMEOUT_S), "the grpc server did not stop"
        pool.shutdown(wait=True, cancel_futures=True)


class AioServer:
    """A ``grpc.aio`` server of ``service`` on a loop in a thread of its own (its sync handlers in
    a pool of 2 threads, ``grpc-aio-pool_N``), started inside ``start`` if given (a coroutine
    awaiting what it is given); ``stop`` ends them."""

    def __init__(
        self, service: AioPricing, start: Callable[[Awaitable[int]], Awaitable[int]] | None = None
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-grpc-aio")
        self.thread.start()
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="grpc-aio-pool")
        self.server: grpc.aio.Server | None = None
        try:
            starting = self._start(service)
            self.port = self.run(starting if start is None else start(starting))
        except BaseException:
            self.stop()
            raise

    def run(self, work: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(_awaiting(work), self.loop).result(TIMEOUT_S)

    async def _start(self, service: AioPricing) -> int:
        self.server = grpc.aio.server(self.pool)
        self.server.add_generic_rpc_handlers((handlers(service),))
        port: int = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return port

    def stop(self) -> None:
        try:
            if self.server is not None:
                self.run(self.server.stop(None))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(TIMEOUT_S)
            assert not self.thread.is_alive(), "the grpc.aio loop did not stop"
            self.loop.close()
            self.pool.shutdown(wait=True, cancel_futures=True)


async def _awaiting(work: Awaitable[T]) -> T:
    return await work


@contextmanager
def instrumented() -> Iterator[Capture]:
    """Capture with every patch installed; every patch undone afterwards."""
    with capture(instrument=True) as trace:
        try:
            yield trace
        finally:
            tracer.uninstrument()


def handoffs(trace: Capture) -> dict[int, wire.Handoff]:
    """Every hand-off captured, by hid (after ``trace.invocations()``, which flushes)."""
    return {
        event.hid: event
        for batch in trace.batches
        for chunk in batch.chunks
        for event in chunk.events
        if isinstance(event, wire.Handoff)
    }


def handed_off_by(trace: Capture, traceparent: str) -> tuple[str, int]:
    """The sequence a received traceparent carries and the invocation whose hand-off it is."""
    parsed = parse_traceparent(traceparent)
    assert parsed is not None, traceparent
    handoff = handoffs(trace)[as_hid(parsed.parent_id)]
    assert handoff.kind == "remote"
    assert handoff.seq == parsed.trace_id
    return parsed.trace_id.hex(), handoff.parent


def named(trace: Capture, name: str) -> list[CapturedInvocation]:
    return [i for i in trace.invocations() if i.name == name]


def rpc_attributes(invocation: CapturedInvocation) -> dict[str, str | int | float | bool]:
    """The attributes a gRPC integration recorded."""
    return {
        key: value
        for key, value in (invocation.attributes or {}).items()
        if key.partition(".")[0] in ("rpc", "error", "server")
    }


def server_attributes(name: str, status: int, **more: str) -> dict[str, str | int]:
    return {
        "rpc.system": "grpc",
        "rpc.service": SERVICE,
        "rpc.method": name,
        "rpc.grpc.status_code": status,
        **{key.replace("_", "."): value for key, value in more.items()},
    }


def client_attributes(name: str, port: int, status: int, **more: str) -> dict[str, str | int]:
    return {
        **server_attributes(name, status, **more),
        "server.address": "127.0.0.1",
        "server.port": port,
    }


def wait_ended(trace: Capture, name: str, count: int = 1) -> list[CapturedInvocation]:
    """The invocations named ``name`` once ``count`` of them have ended (bounded)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = [i for i in named(trace, name) if i.end_ns is not None]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)

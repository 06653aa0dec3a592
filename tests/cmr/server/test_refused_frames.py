"""What the repository server refuses: bad frames of every kind are counted under their reason
and refused while the server carries on, a frame far over the limit costs only its sender the
connection, and decoding arbitrary frames never raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from zmq.utils.monitor import recv_monitor_message

from cmr.server.ingest import Ingest
from cmr.server.server import HARD_LIMIT_FACTOR, ServerThread
from cmr.store import Store
from cmr.store.memory.store import MemoryStore
from invoseq import wire
from tests.cmr.server.conftest import MAX_FRAME, TIMEOUT_MS, BatchFactory, Encode, events, request

pytestmark = pytest.mark.system


def valid_body(batch: wire.Batch) -> bytes:
    return msgspec.msgpack.encode(batch)


def altered_body(batch: wire.Batch, change: Callable[[list[Any]], None]) -> bytes:
    fields = msgspec.to_builtins(batch)
    change(fields)
    return msgspec.msgpack.encode(fields)


def _set(path: tuple[int, ...], value: Any) -> Callable[[list[Any]], None]:
    def change(fields: list[Any]) -> None:
        target = fields
        for index in path[:-1]:
            target = target[index]
        target[path[-1]] = value

    return change


# Each case: the reason it is counted under, and the frames built from a valid batch.
BAD_FRAMES: dict[str, tuple[str, Callable[[wire.Batch], list[bytes]]]] = {
    "not invoseq": ("garbage", lambda b: [b"hello", b"world"]),
    "empty frames": ("garbage", lambda b: [b"", b""]),
    "short header": ("garbage", lambda b: [wire.MAGIC, valid_body(b)]),
    "long header": ("garbage", lambda b: [wire.BATCH_HEADER + b"!", valid_body(b)]),
    "other protocol version": (
        "version",
        lambda b: [wire.MAGIC + bytes((wire.PROTOCOL_VERSION + 1, wire.KIND_BATCH)), valid_body(b)],
    ),
    "an ack sent to the server": ("kind", lambda b: [wire.ACK_HEADER, valid_body(b)]),
    "header alone": ("frames", lambda b: [wire.BATCH_HEADER]),
    "extra frame": ("frames", lambda b: [wire.BATCH_HEADER, valid_body(b), b"extra"]),
    "truncated body": ("decode", lambda b: [wire.BATCH_HEADER, valid_body(b)[:-3]]),
    "body not msgpack": ("decode", lambda b: [wire.BATCH_HEADER, b"\xc1\xc1\xc1"]),
    "puid is a string": ("decode", lambda b: [wire.BATCH_HEADER, altered_body(b, _set((0,), "7"))]),
    "negative batch number": (
        "decode",
        lambda b: [wire.BATCH_HEADER, altered_body(b, _set((1,), -1))],
    ),
    "15-byte sequence id": (
        "decode",
        lambda b: [wire.BATCH_HEADER, altered_body(b, _set((5, 0, 1, 0, 6), b"x" * 15))],
    ),
    "unknown event tag": (
        "decode",
        lambda b: [wire.BATCH_HEADER, altered_body(b, _set((5, 0, 1, 1, 0), 9))],
    ),
    "time overflows wall clock": (
        "decode",
        lambda b: [wire.BATCH_HEADER, altered_body(b, _set((5, 0, 1, 1, 2), 2**63 - 1))],
    ),
    "frame over the limit": ("oversized", lambda b: [wire.BATCH_HEADER, b"\0" * (MAX_FRAME + 1)]),
}


@pytest.mark.parametrize("case", BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
def test_bad_frames_are_counted_and_refused_and_the_server_carries_on(
    store: Store,
    client: zmq.Socket[bytes],
    make_batch: BatchFactory,
    encode_batch: Encode,
    case: tuple[str, Callable[[wire.Batch], list[bytes]]],
) -> None:
    reason, build = case
    refused = make_batch(7, 1, events())
    client.send_multipart(build(refused))

    # Replies come back in order: the first one answering the good batch proves that the bad
    # frames got none, and that they were handled (and counted) before it.
    assert request(client, encode_batch(make_batch(7, 2, events()))) == wire.Ack(7, 2)
    stats = store.stats()
    assert stats.rejected == {reason: 1}
    assert (stats.batches, stats.events) == (1, 2)


def test_frame_far_over_the_limit_only_costs_its_sender_the_connection(
    store: Store,
    server: ServerThread,
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    # libzmq refuses such a frame itself, before the server sees it, and drops the connection.
    flooder = connect(server.endpoint)
    monitor = flooder.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        flooder.send_multipart([wire.BATCH_HEADER, b"\0" * (HARD_LIMIT_FACTOR * MAX_FRAME + 1)])
        assert monitor.poll(TIMEOUT_MS), "the server kept the connection"
        assert recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
    finally:
        flooder.disable_monitor()
        monitor.close()

    other = connect(server.endpoint)
    assert request(other, encode_batch(make_batch(7, 1, events()))) == wire.Ack(7, 1)
    assert store.stats().batches == 1


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.binary(max_size=64), max_size=4), header_ok=st.booleans())
def test_ingest_never_raises_on_arbitrary_frames(frames: list[bytes], header_ok: bool) -> None:
    if header_ok and frames:
        frames[0] = wire.BATCH_HEADER
    store = MemoryStore()

    ack = Ingest(store).handle(frames)

    stats = store.stats()
    if ack is None:
        assert sum(stats.rejected.values()) == 1  # refused, and counted once
    else:
        assert (stats.batches, stats.rejected) == (1, {})  # a valid batch by chance: stored

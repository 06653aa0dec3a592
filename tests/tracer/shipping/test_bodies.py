"""The bodies the sender reuses: a batch is encoded into a kept buffer only once nothing else
holds that buffer, into memory that is there already, and the pool stays within its bounds."""

from __future__ import annotations

import msgspec

from tracer._shipping.bodies import KEEP_BYTES, KEEP_ONE_BYTES, Bodies

decode = msgspec.msgpack.decode


def new_bodies() -> Bodies:
    return Bodies(msgspec.msgpack.Encoder().encode_into)


def test_a_body_still_held_is_never_written_over() -> None:
    bodies = new_bodies()
    first = bodies.encode([1, "one"])
    second = bodies.encode([2, "two"])
    assert second is not first
    assert decode(first) == [1, "one"]
    assert decode(second) == [2, "two"]


def test_a_body_read_through_a_view_is_never_written_over() -> None:
    bodies = new_bodies()
    first = bodies.encode(list(range(1_000)))
    view = memoryview(first)  # as ZeroMQ or a decoded msgspec.Raw would hold it
    del first
    second = bodies.encode([2])
    assert decode(view) == list(range(1_000))
    assert decode(second) == [2]


def test_a_body_let_go_is_encoded_over_in_the_memory_it_had() -> None:
    bodies = new_bodies()
    first = bodies.encode(b"x" * 1_000_000)
    capacity = first.__alloc__()
    del first
    second = bodies.encode([2])
    assert decode(second) == [2]
    assert second.__alloc__() == capacity  # the same buffer, not a new one of 3 bytes


def test_the_pool_keeps_no_more_than_its_bounds() -> None:
    bodies = new_bodies()
    held = [
        bodies.encode(b"x" * (KEEP_ONE_BYTES // 2)) for _ in range(2 * KEEP_BYTES // KEEP_ONE_BYTES)
    ]
    assert 0 < bodies.kept_bytes() <= KEEP_BYTES
    held.clear()
    big = bodies.encode(b"x" * (2 * KEEP_ONE_BYTES))  # a free kept buffer grows past the bound
    assert len(big) > 2 * KEEP_ONE_BYTES
    assert bodies.kept_bytes() <= KEEP_BYTES - KEEP_ONE_BYTES // 2
    kept = bodies.kept_bytes()
    del big  # not kept: let go with its batch
    assert bodies.encode([1]).__alloc__() < KEEP_ONE_BYTES
    assert bodies.kept_bytes() == kept


def test_released_buffers_are_let_go() -> None:
    bodies = new_bodies()
    body = bodies.encode(b"x" * 100_000)
    del body
    bodies.release()
    assert bodies.kept_bytes() == 0
    assert bodies.encode([1]).__alloc__() < 100_000

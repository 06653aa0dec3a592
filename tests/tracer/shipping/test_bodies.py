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


def test_the_pools_memory_beyond_the_batches_lengths_is_held_against_the_bound() -> None:
    held: list[int] = []
    bodies = Bodies(msgspec.msgpack.Encoder().encode_into, held.append)
    first = bodies.encode(b"x" * 100_000)
    # in use: the batch counts its length (the delivery does), the pool the rest of the buffer
    assert sum(held) == first.__alloc__() - len(first)
    capacity = first.__alloc__()
    del first
    second = bodies.encode([1])  # the same buffer, written over
    assert second.__alloc__() == capacity
    assert sum(held) == capacity - len(second)
    third = bodies.encode(b"y" * 10)  # a new buffer: the second is still in use
    assert sum(held) == bodies.kept_bytes() - len(second) - len(third)
    bodies.release()
    assert sum(held) == 0


def test_a_small_memory_bound_keeps_a_small_pool() -> None:
    keep = 1024 * 1024  # the sender keeps a quarter of the bound at most: here, a 4 MiB bound
    bodies = Bodies(msgspec.msgpack.Encoder().encode_into, keep_bytes=keep)
    held = [bodies.encode(b"x" * (keep // 4)) for _ in range(8)]
    assert 0 < bodies.kept_bytes() <= keep
    held.clear()
    bodies.encode(b"x" * keep)  # bigger than the whole pool: not kept
    assert bodies.kept_bytes() <= keep

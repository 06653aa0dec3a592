"""The C accelerator's event buffer: nothing allocated per event once it has grown, msgspec's
bytes exactly, and a taken buffer that keeps recording."""

from __future__ import annotations

import resource
import sys
import tracemalloc
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracer
from tests.tracer.core.implementations import _speedups, needs_c_path
from tracer._core import recorder
from tracer.testing import capture


@tracer.traced
def add(x: int, y: int = 1) -> int:
    return x + y


@needs_c_path
def test_recording_allocates_nothing_per_event_once_the_buffer_has_grown() -> None:
    events = recorder.thread_events()
    assert isinstance(events, _speedups.EventBuffer)

    def record(calls: int) -> None:
        for i in range(calls):
            add(i)

    quiet = {"flush_interval_ms": 3_600_000, "heartbeat_ms": 3_600_000, "sample_interval_ms": 0}
    with capture(**quiet):  # no other thread drains or allocates meanwhile
        for _ in range(2):  # grows the array, then the spare one
            record(5000)
            events.take()
        # The sender has started and gone idle first: tracemalloc.stop() racing a thread that
        # allocates can crash CPython 3.11 (python/cpython#128679, fixed in 3.12 and 3.13).
        assert tracer.flush(30)
        tracemalloc.start()
        try:
            record(1)  # first-call effects out of the measurement
            before, _ = tracemalloc.get_traced_memory()
            record(5000)
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(events) >= 10_000
    assert held - before < 5000  # under a byte per event: they wait in preallocated records


ints = st.one_of(
    st.integers(0, 300),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63, -32, -33]),
    st.sampled_from([-128, -129, -32768, -32769, -(2**31), -(2**31) - 1]),
)
ids_ = st.integers(0, 2**64 - 1)
names = st.text(max_size=40) | st.text(min_size=250, max_size=300) | st.sampled_from(["a" * 70000])
seqs = st.binary(min_size=16, max_size=16) | st.binary(max_size=20)
starts = st.tuples(st.just(0), ids_, ids_, ids_, ids_, ints, seqs)
ends = st.tuples(st.just(1), ids_, ints)
errors = st.tuples(st.just(2), ids_, ints, names)
handoffs = st.tuples(st.just(3), ids_, ids_, names, ids_, ints, seqs)
odd = st.one_of(
    st.tuples(st.sampled_from([0, 1, 2, 3, True, -1, 9]), ints),
    st.lists(st.integers(0, 5), max_size=3),
    st.none(),
    st.tuples(st.just(1), st.booleans(), ints),
)
any_events = st.lists(st.one_of(starts, ends, errors, handoffs, odd), max_size=60)


@needs_c_path
@settings(max_examples=300, deadline=None)
@given(events=any_events, cut=st.tuples(st.integers(-70, 70), st.integers(-70, 70)))
def test_the_c_encoding_is_msgspecs_byte_for_byte(events: list[Any], cut: tuple[int, int]) -> None:
    buffer = _speedups.EventBuffer()
    for event in events:
        buffer.append(event)
    assert len(buffer) == len(events)
    taken = buffer.take()
    assert len(buffer) == 0
    if not events:
        assert taken is None
        return
    assert len(taken) == len(events)
    assert taken.msgpack() == msgspec.msgpack.encode(events)
    start, stop = cut
    assert taken[start:stop].msgpack() == msgspec.msgpack.encode(events[start:stop])
    # The sender splices a slice in through the buffer protocol: the same bytes, read-only.
    assert bytes(taken[start:stop]) == msgspec.msgpack.encode(events[start:stop])
    assert bytes(taken) == msgspec.msgpack.encode(events)
    assert memoryview(taken).readonly
    batch = msgspec.msgpack.encode([7, msgspec.Raw(taken[start:stop]), 8])
    assert msgspec.msgpack.decode(batch) == msgspec.msgpack.decode(
        msgspec.msgpack.encode([7, events[start:stop], 8])
    )
    assert len(taken[start:stop]) == len(events[start:stop])
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(events))
    assert list(taken) == decoded  # indexing decodes an event (its tuple's items, as a list)
    assert list(reversed(taken[start:stop])) == decoded[start:stop][::-1]
    assert taken[-1] == decoded[-1]


@needs_c_path
def test_each_slice_from_the_first_event_exports_its_own_bytes() -> None:
    """The first slice exported from a take's first event has its header written in the room the
    take left before that event (the take's own memory, no copy); the room serves that one
    slice: another from there, of another length, is a copy, and neither changes the other."""
    buffer = _speedups.EventBuffer()
    events = [(1, i, i) for i in range(40)]
    for event in events:
        buffer.append(event)
    taken = buffer.take()
    assert taken is not None
    cuts = [(0, 40), (0, 3), (0, 20), (5, 40)]
    views = [memoryview(taken[start:stop]) for start, stop in cuts] + [memoryview(taken)]
    expected = [msgspec.msgpack.encode(events[start:stop]) for start, stop in cuts]
    assert [bytes(view) for view in views] == [*expected, msgspec.msgpack.encode(events)]
    for view in views:
        view.release()


@needs_c_path
def test_a_taken_buffer_keeps_recording_into_its_spare_array() -> None:
    buffer = _speedups.EventBuffer()
    seq = bytes(range(16))
    for round_ in range(3):
        events = [(1, i, round_) for i in range(1000)] + [(0, 1, 2, 3, 4, 5, seq)]
        for event in events:
            buffer.append(event)
        taken = buffer.take()
        assert taken is not None
        assert taken.msgpack() == msgspec.msgpack.encode(events)
    assert buffer.take() is None


@needs_c_path
def test_a_take_lets_go_of_what_its_events_held_even_when_one_fails_to_encode() -> None:
    buffer = _speedups.EventBuffer()
    name = "".join(["Custom", "Error"])  # a str of this test's own
    unencodable = object()
    before = [sys.getrefcount(name), sys.getrefcount(unencodable)]
    buffer.append((2, 1, 5, name))
    buffer.append((9, unencodable, 0))  # fits no record layout: msgspec encodes it, and cannot
    buffer.append((2, 2, 6, name))
    assert sys.getrefcount(name) == before[0] + 2
    with pytest.raises(TypeError):
        buffer.take()
    assert [sys.getrefcount(name), sys.getrefcount(unencodable)] == before
    assert buffer.take() is None


@needs_c_path
def test_a_buffer_gives_the_sender_exactly_the_events_it_counted() -> None:
    buffer = _speedups.EventBuffer()
    events = [(1, i, i) for i in range(3000)]  # past the size where arrays are mapped
    for event in events[:2000]:
        buffer.append(event)
    counted = len(buffer)
    for event in events[2000:]:  # recorded after the sender counted: they stay, in order
        buffer.append(event)
    taken = buffer.take(counted)
    assert taken is not None
    assert taken.msgpack() == msgspec.msgpack.encode(events[:2000])
    assert len(buffer) == 1000
    rest = buffer.take()
    assert rest is not None
    assert rest.msgpack() == msgspec.msgpack.encode(events[2000:])
    assert buffer.take(5) is None


@needs_c_path
def test_bytes_the_tracer_keeps_are_forgotten_by_tracemalloc_and_freed_harmlessly() -> None:
    size = 1 << 20
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        body = _speedups.untracked(bytes, size)  # as the sender encodes a batch's body
        kept, _ = tracemalloc.get_traced_memory()
        counted = bytes(size)  # made the usual way: counted
        both, _ = tracemalloc.get_traced_memory()
        del body  # freed while tracing: no trace to remove, nothing else changes
        freed, _ = tracemalloc.get_traced_memory()
        del counted
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept - before < 4096
    assert both - kept >= size
    assert abs(freed - both) < 4096
    assert abs(after - before) < 4096
    assert _speedups.untracked(list, "ab") == ["a", "b"]  # not bytes: returned as it is


@needs_c_path
def test_bodies_the_tracer_encodes_into_its_own_buffers_are_forgotten_by_tracemalloc() -> None:
    encode_into = msgspec.msgpack.Encoder().encode_into
    payload = b"x" * (1 << 20)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        body = bytearray()
        _speedups.untracked_into(encode_into, payload, body)  # grown while tracing, then forgotten
        _speedups.untracked_into(encode_into, payload * 2, body)  # grown again: forgotten again
        kept, _ = tracemalloc.get_traced_memory()
        counted = bytearray()
        encode_into(payload, counted)  # encoded the usual way: counted
        both, _ = tracemalloc.get_traced_memory()
        del body
        freed, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept - before < 4096
    assert both - kept >= len(payload)
    assert abs(freed - both) < 4096
    with pytest.raises(TypeError):
        _speedups.untracked_into(encode_into, payload, b"not a bytearray")


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@needs_c_path
def test_a_busy_thread_records_into_the_memory_its_last_drain_freed() -> None:
    buffer = _speedups.EventBuffer()
    events = [(1, i, i) for i in range(100_000)]  # what a busy thread records between drains
    for _ in range(2):
        for event in events:
            buffer.append(event)
        taken = buffer.take()
        assert taken is not None
        assert len(taken) == len(events)
        del taken
    before = _minor_faults()
    for event in events:  # into the spare array: its pages are there already
        buffer.append(event)
    faults = _minor_faults() - before
    assert faults < 100  # fresh memory: about 1,760 pages of 72-byte records
    taken = buffer.take()
    assert taken is not None
    assert taken.msgpack() == msgspec.msgpack.encode(events)


@needs_c_path
def test_the_senders_encodings_reuse_the_memory_of_the_last_ones() -> None:
    """A take encodes into blocks the previous takes freed, and the batch splices it in from
    there: a busy sender writes into no fresh pages (each a page fault here), and an idle process
    gives the blocks back."""
    buffer = _speedups.EventBuffer()
    seq = bytes(range(16))
    events = [(0, i, 0, 1, 2, i, seq) for i in range(50_000)]  # about 2.3 MiB encoded

    def drain_and_splice() -> int:
        for event in events:
            buffer.append(event)
        before = _minor_faults()
        taken = buffer.take()
        assert taken is not None
        spliced = [msgspec.Raw(taken[:30_000]), msgspec.Raw(taken[30_000:])]  # two batches
        faults = _minor_faults() - before
        assert bytes(spliced[0]) == msgspec.msgpack.encode(events[:30_000])
        assert bytes(spliced[1]) == msgspec.msgpack.encode(events[30_000:])
        return faults

    drain_and_splice()  # the first takes map their blocks
    drain_and_splice()
    assert drain_and_splice() < 60  # fresh memory: about 1,350 pages
    assert _speedups.pool_bytes() > 2_000_000
    _speedups.release_pool()
    assert _speedups.pool_bytes() == 0
    assert drain_and_splice() > 500  # the blocks were given back: mapped again
    assert _speedups.pool_bytes() > 2_000_000


@needs_c_path
def test_an_idle_process_gives_the_encodings_and_arrays_memory_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kept while drains take events, and for recorder.IDLE_TRIM_S after the last one; then a
    drain that takes nothing gives the blocks and the thread's arrays back."""
    clock = [1000.0]
    monkeypatch.setattr(recorder, "_monotonic", lambda: clock[0])
    with capture(flush_interval_ms=3_600_000, sample_interval_ms=0):
        for i in range(20_000):
            add(i)
        assert tracer.flush(10)
        kept = _speedups.pool_bytes()
        assert kept > 0  # kept for the next drain
        assert recorder.holds_idle_memory()
        clock[0] += recorder.IDLE_TRIM_S / 2
        assert tracer.flush(10)  # nothing recorded since, but not for long: kept
        assert _speedups.pool_bytes() == kept
        assert recorder.holds_idle_memory()
        clock[0] += recorder.IDLE_TRIM_S
        assert tracer.flush(10)  # idle for longer: given back
        assert _speedups.pool_bytes() == 0
        assert not recorder.holds_idle_memory()


@needs_c_path
def test_a_trimmed_buffer_keeps_what_it_holds_and_records_on() -> None:
    buffer = _speedups.EventBuffer()
    events = [(1, i, i) for i in range(5000)]
    for event in events:
        buffer.append(event)
    assert buffer.take() is not None
    buffer.trim()  # idle: its arrays go back
    for event in events:
        buffer.append(event)
    buffer.trim()  # holding events: they stay
    taken = buffer.take()
    assert taken is not None
    assert taken.msgpack() == msgspec.msgpack.encode(events)

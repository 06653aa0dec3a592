"""Ingest's index of a batch: the C pass (``_pack.c``'s ``scan``) gives what Python's pass gives,
whatever the batch holds, and both refuse a batch whose wall times overflow."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmr.store import batch_index
from cmr.store.accel import accelerator
from cmr.store.base import InvalidBatchError
from cmr.store.batch_index import PackedBatch, Preparation, _pack_events, _pack_scanned
from cmr.store.grouping import _merged, group_parts
from invoseq import wire
from tests.cmr.conftest import make_batch
from tests.cmr.store.records import seq_id, start
from tests.cmr.store.strategies import SEQ, batches

pytestmark = pytest.mark.skipif(accelerator is None, reason="the C accelerator is not built")


def both(
    batch: wire.Batch, *, encode: bool = True, body: bytes | None = None
) -> tuple[PackedBatch, PackedBatch]:
    assert accelerator is not None
    return (
        _pack_events(batch, encode=encode),
        _pack_scanned(batch, encode=encode, accel=accelerator, body=body),
    )


def comparable(packed: PackedBatch) -> dict[str, object]:
    """The index with the orders no store relies on taken out (sets and per-sequence rows)."""
    summary = packed.summary
    return {
        "chunks": packed.chunks,
        "events": packed.events,
        "first_start": packed.first_start,
        "seqs": packed.seqs,
        "methods": packed.methods,
        "seq_methods": packed.seq_methods,
        "late_ends": packed.late_ends,  # first write wins: their order matters
        "late_attrs": packed.late_attrs,
        "handoffs": packed.handoffs,
        "counts": dict(summary.counts),
        "threads": summary.threads,
        "roots": sorted(summary.roots, key=repr),
        "entries": summary.entries,
        "opened": sorted(summary.opened),
    }


@settings(max_examples=400, deadline=None)
@given(batches, st.sampled_from([0, 1_000_000, -7]))
def test_the_c_pass_indexes_a_batch_as_python_does(
    chunk_lists: list[list[wire.ThreadChunk]], offset: int
) -> None:
    for batch_no, chunks in enumerate(chunk_lists):  # a thread's chunks may repeat
        batch = make_batch(5, batch_no, {}, clock_offset_ns=offset)
        batch = msgspec.structs.replace(batch, chunks=chunks)
        python, scanned = both(batch)
        assert comparable(scanned) == comparable(python)
        # From the received message: its chunks kept as they came, the same index.
        _, from_body = both(batch, body=msgspec.msgpack.encode(batch))
        assert comparable(from_body) == comparable(python)


def test_a_busy_batch_is_indexed_alike() -> None:
    """Many sequences and threads, calls that end in the batch, later, or raise; a table that
    grows past its first size."""
    events: dict[int, list[wire.Event]] = {}
    for tid in range(1, 5):
        chunk = events.setdefault(tid, [])
        for n in range(3_000):
            iid = tid * 100_000 + n
            seq = (n // 40).to_bytes(16, "big")
            parent = 0 if n % 40 == 0 else iid - 1
            chunk.append(wire.Start(iid, parent, 7 if n % 400 == 0 else 0, n % 13, n, seq))
            if n % 5 == 3:
                chunk.append(wire.Error(iid, n + 1, "ValueError"))
            elif n % 7:
                chunk.append(wire.End(iid, n + 2))
        chunk.append(wire.End(999_999_000 + tid, 5))  # its Start was in an earlier batch
    python, scanned = both(make_batch(1, 1, events, clock_offset_ns=10**9))
    assert comparable(scanned) == comparable(python)
    assert len(scanned.first_start) == 75
    assert scanned.summary.counts[SEQ] == 0


@pytest.mark.parametrize("t_ns", [2**63 - 10, -(2**63) + 10])
def test_a_wall_time_beyond_64_bits_refuses_the_batch_either_way(t_ns: int) -> None:
    batch = make_batch(1, 1, {1: [wire.Start(1, 0, 0, 1, t_ns, SEQ)]}, clock_offset_ns=t_ns // 2)
    for pack in (_pack_events, lambda b, encode: both(b)[1]):
        with pytest.raises(InvalidBatchError, match="time out of range"):
            pack(batch, encode=True)


def test_without_encoding_the_blob_is_left_out_but_the_index_is_the_same() -> None:
    events: dict[int, list[wire.Event]] = {1: [wire.Start(1, 0, 0, 3, 10, SEQ), wire.End(1, 20)]}
    python, scanned = both(make_batch(1, 1, events), encode=False)
    assert scanned.chunks == b""
    assert scanned.seq_methods == {}
    assert comparable(scanned) == comparable(python)
    assert scanned.methods == {SEQ: [3]}


def test_of_two_candidates_started_at_the_same_instant_the_lower_iid_is_the_root() -> None:
    events: dict[int, list[wire.Event]] = {
        1: [wire.Start(2, 9, 0, 1, 50, SEQ), wire.Start(1, 9, 0, 1, 50, SEQ)]
    }
    for packed in both(make_batch(1, 1, events)):
        ((_seq, untrue, _handed, _start, _puid, iid, *_rest),) = packed.summary.roots
        assert (untrue, iid) == (1, 1)


def test_the_chunks_of_a_received_message_are_kept_as_they_came() -> None:
    """A sender may encode integers wider than msgspec would: the stored blob is its bytes, and
    reads back to the same events."""
    events: dict[int, list[wire.Event]] = {1: [wire.Start(1, 0, 0, 3, 10, SEQ), wire.End(1, 20)]}
    batch = make_batch(1, 1, events)
    chunks = msgspec.msgpack.encode(batch.chunks)
    narrow = b"\x03\x0a\xc4\x10"  # the Start's method 3, t_ns 10, then its sequence id
    assert chunks.count(narrow) == 1
    wide = chunks.replace(narrow, b"\x03\xcf" + (10).to_bytes(8, "big") + b"\xc4\x10")
    body = msgspec.msgpack.encode(batch).replace(chunks, wide)
    assert msgspec.msgpack.decode(body, type=wire.Batch) == batch

    python, scanned = both(batch, body=body)

    assert scanned.chunks == wide
    assert msgspec.msgpack.decode(scanned.chunks, type=list[wire.ThreadChunk]) == batch.chunks
    assert comparable(scanned) | {"chunks": b""} == comparable(python) | {"chunks": b""}


def test_a_body_the_c_reader_cannot_follow_is_encoded_again() -> None:
    events: dict[int, list[wire.Event]] = {1: [wire.Start(1, 0, 0, 3, 10, SEQ), wire.End(1, 20)]}
    python, scanned = both(make_batch(1, 1, events), body=b"\x90")  # not the batch at all
    assert comparable(scanned) == comparable(python)


def test_a_prepared_group_keeps_no_decoded_event_and_refuses_only_what_overflows() -> None:
    # A group holds each batch's blob and index, not its decoded events: a server preparing
    # eight batches holds one batch of events at a time. A batch whose wall time overflows is
    # refused alone, its place in the group kept.
    events: list[wire.Event] = [wire.Start(1, 0, 0, 1, 100, SEQ), wire.End(1, 200)]
    good = make_batch(7, 2, {1: events}, methods={1: "app.main"})
    overflowing = make_batch(7, 1, {1: [wire.Start(2, 0, 0, 1, 100, SEQ), wire.End(2, 2**63 - 1)]})
    late = make_batch(6, 9, {1: events})
    group = Preparation()
    for batch in (good, overflowing, late):
        group.add(batch)

    assert [type(outcome) for outcome in group.outcomes] == [bool, InvalidBatchError, bool]
    assert all(ready.batch.chunks == [] for ready in group.prepared)
    assert [ready.packed.events for ready in group.prepared] == [2, 2]
    kept = group.prepared[0].batch  # all but the chunks: what the stores write besides the blob
    assert (kept.puid, kept.batch_no, kept.process, kept.methods) == (
        7,
        2,
        good.process,
        good.methods,
    )
    # Written process by process, whatever the order of arrival; each outcome where it came.
    assert [(r.batch.puid, r.batch.batch_no, r.at) for r in group.in_write_order()] == [
        (6, 9, 2),
        (7, 2, 0),
    ]


def test_a_group_whose_sequences_are_each_in_one_batch_merges_as_one_sequence_at_a_time() -> None:
    # Requests: each sequence in one batch, so group_parts puts the parts side by side; the
    # result is what the merge sequence by sequence gives.
    packs = [
        batch_index.pack(make_batch(7, n, {n: [start(2 * n, 100 * n, seq_id(f"{n}a"))]}))
        for n in range(1, 4)
    ]
    merged, first_start = _merged(packs)
    grouped = group_parts(packs)
    assert grouped.first_start == first_start
    assert grouped.summary == merged
    assert len(grouped.summary.roots) == 3

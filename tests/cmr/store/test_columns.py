"""The C reader of stored batches (``cmr.store.columns``) gives the records
``stored_batches.unpack`` gives, whatever the batches hold, and refuses a damaged blob without
reading past it."""

from __future__ import annotations

import contextlib
import sys
from array import array
from collections.abc import Iterator

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmr.store.accel import accelerator
from cmr.store.column_passes import children, hang, ranked, spans, subtree_sizes, take, total_at
from cmr.store.columns import RecordColumns, columns_available, distinct_values, unpack_columns
from cmr.store.stored_batches import LateAttrs, LateEnd, StoredBatch, encode_chunks, unpack
from invoseq import wire
from tests.cmr.store.strategies import PUIDS, SEQ, iids, processes, times

pytestmark = pytest.mark.skipif(not columns_available(), reason="the C accelerator is not built")

late_end_rows = st.lists(
    st.tuples(st.sampled_from(PUIDS), iids, times, st.none() | st.just("OSError")), max_size=4
)
late_attr_rows = st.lists(
    st.tuples(st.sampled_from(PUIDS), iids, st.integers(0, 5), st.just(b'{"late": 1}')),
    max_size=3,
)


def stored(by_process: dict[int, list[list[wire.ThreadChunk]]], offset: int) -> list[StoredBatch]:
    return [
        (puid, batch_no, offset + batch_no, encode_chunks(chunks))
        for puid in sorted(by_process)
        for batch_no, chunks in enumerate(by_process[puid])
    ]


def both(
    batches: list[StoredBatch], late_ends: list[LateEnd], late_attrs: list[LateAttrs]
) -> tuple[RecordColumns, list[wire.Start]]:
    def asked_ends(keys: list[tuple[int, int]]) -> list[LateEnd]:
        return [row for row in late_ends if (row[0], row[1]) in set(keys)]

    def asked_attrs(puids: set[int]) -> list[LateAttrs]:
        return [row for row in late_attrs if row[0] in puids]

    columns = unpack_columns(SEQ, iter(batches), asked_ends, asked_attrs)
    records = unpack(SEQ, batches, asked_ends, asked_attrs)
    return columns, records  # type: ignore[return-value]


@settings(max_examples=300, deadline=None)
@given(processes, st.sampled_from([0, 1_000, -7]), late_end_rows, late_attr_rows)
def test_columns_hold_the_records_unpack_makes(
    by_process: dict[int, list[list[wire.ThreadChunk]]],
    offset: int,
    late_ends: list[LateEnd],
    late_attrs: list[LateAttrs],
) -> None:
    columns, records = both(stored(by_process, offset), late_ends, late_attrs)
    assert list(columns) == records
    assert len(columns) == len(records)
    assert columns == records
    for i, record in enumerate(records):
        assert columns[i] == record
        assert columns.position(record.puid, record.iid) == i
    if records:
        assert columns[-1] == records[-1]
        assert columns[1:] == records[1:]
    assert columns.position(PUIDS[0], 99) == -1
    for name in ("puid", "iid", "parent", "hid", "tid", "method", "start_ns"):
        assert distinct_values(columns, name) == {getattr(r, name) for r in records}


def test_a_sequence_among_many_other_calls_is_indexed_by_its_own_rows_alone() -> None:
    """A short sequence in batches full of other sequences' Ends: its index answers for its
    rows, and for nothing else."""
    ours = [wire.Start(1, 0, 0, 1, 10, SEQ), wire.Start(2, 1, 0, 2, 11, SEQ), wire.End(2, 12)]
    others: list[wire.Event] = [wire.End(iid, 13) for iid in range(100, 20_100)]
    chunks = [wire.ThreadChunk(1, [*ours, *others, wire.End(1, 14)])]
    columns, records = both([(3, 0, 0, encode_chunks(chunks))], [], [])
    assert list(columns) == records
    assert [(r.iid, r.end_ns) for r in columns] == [(1, 14), (2, 12)]
    assert [columns.position(3, iid) for iid in (1, 2, 100, 20_099)] == [0, 1, -1, -1]
    assert list(columns.parent_rows()) == [-1, 0]


#: iids a process's counter never gives together: far apart (a window that stops growing and
#: sends the rest to the hash table), below the first one met, at the top of int64.
SPREAD = (1, 2, 3, 4_000, 70_000, 300_000, 2**40, 2**62, 2**63 - 1)


def spread(
    by_process: dict[int, list[list[wire.ThreadChunk]]], to: dict[int, int]
) -> dict[int, list[list[wire.ThreadChunk]]]:
    """The batches with each iid (and parent) 1..6 replaced by ``to``'s."""

    def moved(event: wire.Event) -> wire.Event:
        if isinstance(event, wire.Start):
            return msgspec.structs.replace(event, iid=to[event.iid], parent=to.get(event.parent, 0))
        if isinstance(event, wire.Handoff):
            return msgspec.structs.replace(event, parent=to[event.parent])
        return msgspec.structs.replace(event, iid=to[event.iid])  # type: ignore[arg-type]

    return {
        puid: [
            [wire.ThreadChunk(c.tid, [moved(e) for e in c.events]) for c in batch]
            for batch in batches
        ]
        for puid, batches in by_process.items()
    }


@settings(max_examples=300, deadline=None)
@given(processes, st.lists(st.sampled_from(SPREAD), min_size=6, max_size=6, unique=True))
def test_iids_far_apart_or_below_the_first_are_read_as_unpack_reads_them(
    by_process: dict[int, list[list[wire.ThreadChunk]]], chosen: list[int]
) -> None:
    """Each process's iids sit in a window from the first one met; those out of its reach sit
    in a hash table: the records and the index are the same either way."""
    batches = stored(spread(by_process, dict(zip(range(1, 7), chosen, strict=True))), 0)
    columns, records = both(batches, [], [])
    assert list(columns) == records
    for i, record in enumerate(records):
        assert columns.position(record.puid, record.iid) == i
    assert columns.position(PUIDS[0], 7) == -1
    parents = [columns.position(r.puid, r.parent) if r.parent else -1 for r in records]
    assert list(columns.parent_rows()) == [-1 if p == i else p for i, p in enumerate(parents)]


def test_a_long_run_then_calls_out_of_its_reach_keep_their_ends_and_rows() -> None:
    """Two processes: one a run of 200,000 calls, each ended, then calls far above it and
    below its first; the other interleaved with it, in the same batches."""
    run = [
        wire.Start(iid, iid - 1 if iid > 1_000 else 0, 0, 1, iid, SEQ)
        for iid in range(1_000, 201_000)
    ]
    ends = [wire.End(iid, iid + 5) for iid in range(1_000, 201_000)]
    far = [wire.Start(10**12, 1_000, 0, 2, 300_000, SEQ), wire.Start(5, 10**12, 0, 3, 300_001, SEQ)]
    far_ends = [wire.End(5, 300_002), wire.Error(10**12, 300_003, "OSError")]
    chunks = [
        [wire.ThreadChunk(1, run[:100_000]), wire.ThreadChunk(2, ends[:50_000])],
        [
            wire.ThreadChunk(1, [*run[100_000:], *far]),
            wire.ThreadChunk(2, [*ends[50_000:], *far_ends]),
        ],
    ]
    other = [[wire.ThreadChunk(1, [wire.Start(7, 0, 0, 1, 150_000, SEQ), wire.End(1_000, 1)])]]
    batches = stored({3: chunks, 7: other}, 0)
    columns, records = both(batches, [], [])
    assert len(columns) == 200_003
    assert list(columns) == records
    assert columns.position(3, 10**12) == 200_001
    assert columns[200_001].error == "OSError"
    assert columns.position(3, 5) == 200_002
    assert columns[200_002].end_ns == 300_003  # the second batch: its clock offset is 1
    assert columns.position(7, 7) == 149_000  # before process 3's call of its time + 1
    assert columns.position(7, 1_000) == -1  # an End without its Start is not a row
    parents = columns.parent_rows()
    assert parents[columns.position(3, 5)] == columns.position(3, 10**12)
    assert parents[columns.position(3, 10**12)] == columns.position(3, 1_000) == 0


@pytest.fixture(params=["handed over", "copied"])
def columns_made(request: pytest.FixtureRequest) -> Iterator[str]:
    """Columns handed to Python as the arrays' own buffers, then copied (as on an array type
    whose layout is not the one ``_arrays.h`` knows)."""
    assert accelerator is not None
    was = accelerator.adopting(request.param == "handed over")
    yield request.param
    accelerator.adopting(was)


def test_on_this_python_columns_are_handed_over_without_a_copy() -> None:
    assert accelerator is not None
    assert accelerator.adopting() is (sys.implementation.name == "cpython")


def test_columns_handed_over_or_copied_are_arrays_python_can_grow_and_free(
    columns_made: str,
) -> None:
    """Each column and each C pass's result is an array of its own: it grows, shrinks and is
    freed as any array (a buffer the array does not own would crash here)."""
    chunks = [wire.ThreadChunk(1, [wire.Start(i, i - 1, 0, 1, i, SEQ) for i in range(1, 5000)])]
    columns, records = both([(3, 0, 0, encode_chunks(chunks))], [], [])
    assert list(columns) == records
    parents = columns.parent_rows()
    assert list(parents) == list(range(-1, 4998))
    held = hang(parents, 0)
    assert held is not None
    assert list(held) == [-1, *range(4998)]
    starts, rows = children(held)
    assert list(rows) == list(range(1, 4999))
    assert list(starts) == [*range(4999), 4998]  # the last row holds none
    assert list(subtree_sizes(held)[:3]) == [4998, 4997, 4996]
    assert list(take(columns.iid, array("q", [4998, 0]))) == [4999, 1]
    assert spans(columns).typecode == "Q"
    for found in (columns.iid, columns.end_ns, parents, held, starts, rows):
        found.extend(range(100_000))  # a reallocation of its buffer
        del found[10:]
        found.append(7)
        assert len(found) == 11
    del columns, parents, held, starts, rows
    backwards = [wire.ThreadChunk(2, [wire.Start(i, 0, 0, 1, -i, SEQ) for i in range(1, 3000)])]
    columns, records = both([(3, 0, 0, encode_chunks(backwards))], [], [])  # sorted in C
    assert list(columns) == records
    assert columns.iid[0] == 2999


def test_the_sum_at_rows_and_the_longest_of_rows_are_those_python_gives() -> None:
    values = array("q", [5, 9, 9, 1, 7, 9])
    rows = array("q", [3, 1, 4, 2, 5])
    assert total_at(values, rows) == 1 + 9 + 7 + 9 + 9
    assert total_at(values, array("q")) == 0
    with pytest.raises(ValueError, match="out of range"):
        total_at(values, array("q", [6]))
    assert list(take(values, rows)) == [1, 9, 7, 9, 9]
    with pytest.raises(ValueError, match="out of range"):
        take(values, array("q", [-1]))
    everything = ranked(rows, values, len(rows))
    assert [rows[i] for i in everything] == [1, 2, 5, 4, 3]  # ties in order
    assert ranked(rows, values, 1) == everything[:1]
    assert ranked(array("q"), values, 1) == []


def test_a_call_ended_in_a_later_batch_or_failed_then_returned_keeps_the_first_end() -> None:
    batch_1 = [
        wire.ThreadChunk(1, [wire.Start(1, 0, 0, 1, 10, SEQ), wire.Start(2, 1, 0, 2, 11, SEQ)]),
        wire.ThreadChunk(2, [wire.Error(2, 15, "KeyError"), wire.End(2, 16)]),  # End wins here
    ]
    batch_2 = [wire.ThreadChunk(1, [wire.End(1, 30), wire.Error(1, 31, "ValueError")])]
    batches = [(3, 0, 100, encode_chunks(batch_1)), (3, 1, 100, encode_chunks(batch_2))]
    columns, records = both(batches, [], [])
    assert [(r.iid, r.start_ns, r.end_ns, r.error) for r in columns] == [
        (1, 110, 130, None),
        (2, 111, 116, None),
    ]
    assert list(columns) == records


def test_a_repeated_start_keeps_the_first_start_and_the_first_end() -> None:
    first = [wire.ThreadChunk(1, [wire.Start(1, 0, 0, 1, 10, SEQ)])]
    again = [wire.ThreadChunk(1, [wire.Start(1, 0, 0, 2, 20, SEQ), wire.End(1, 25)])]
    late = [wire.ThreadChunk(1, [wire.End(1, 40)])]
    batches = [(3, n, 0, encode_chunks(c)) for n, c in enumerate([first, again, late])]
    columns, records = both(batches, [], [])
    assert [(r.method, r.start_ns, r.end_ns) for r in columns] == [(1, 10, 25)]
    assert list(columns) == records


def blob_of_one_call() -> bytes:
    return encode_chunks([wire.ThreadChunk(1, [wire.Start(1, 0, 0, 1, 10, SEQ), wire.End(1, 20)])])


@pytest.mark.parametrize(
    "damage",
    [
        lambda blob: blob[:-1],  # truncated
        lambda blob: blob[: len(blob) // 2],
        lambda blob: blob + b"\x00",  # trailing bytes
        lambda blob: b"\x91\x93\x01\x90",  # a chunk of three fields
        lambda blob: b"\x91\x92\x01\x91\x92\x09\x01",  # an unknown event
        lambda blob: b"\xc1",  # never used in msgpack
        lambda blob: msgspec.msgpack.encode([[1, [[0, 1, 0, 0, 1, "x", SEQ]]]]),  # a str time
    ],
)
def test_a_damaged_blob_is_refused_with_a_value_error(damage: object) -> None:
    blob = damage(blob_of_one_call())  # type: ignore[operator]
    with pytest.raises(ValueError, match="damaged batch"):
        unpack_columns(SEQ, [(3, 0, 0, blob)], lambda keys: [], lambda puids: [])


def test_a_wall_time_beyond_64_bits_is_a_damaged_batch() -> None:
    with pytest.raises(ValueError, match="time out of range"):
        unpack_columns(SEQ, [(3, 0, 2**63 - 15, blob_of_one_call())], lambda k: [], lambda p: [])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_is_refused_or_read_never_crashes(blob: bytes) -> None:
    with contextlib.suppress(ValueError):
        unpack_columns(SEQ, [(3, 0, 0, blob)], lambda keys: [], lambda puids: [])

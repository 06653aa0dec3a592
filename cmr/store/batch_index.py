"""Ingest's index of a batch: what a store keeps beside the batch's blob (``stored_batches``'s
module docstring says what and why), made in one pass over the batch's events.

With the C accelerator the pass is ``_pack.c``'s ``scan`` over the encoded thread chunks (the
blob the store keeps), and Python reads only the few events it points at (Errors, Handoffs,
Attrs); without it, comprehensions over the decoded events do the same (``_pack_events``, the
reference: the tests compare both on random batches). The rules: an iid belongs to the sequence
of its last Start in the batch; it is ended by any End or Error in the batch (an Error's end wins
over an End's); a sequence's root candidate is its Start of lowest ``root_rank``; wall time =
event time + the batch's clock offset, and a batch whose wall times overflow a signed 64-bit
integer is refused whole.
"""

from __future__ import annotations

import abc
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

import msgspec

from cmr.store import raw_batch
from cmr.store._samples import sample_records
from cmr.store.accel import accelerator
from cmr.store.base import GroupCommitStore, InvalidBatchError, Outcome, SampleRecord
from cmr.store.raw_batch import RawBatch
from cmr.store.rules import HandoffRow
from cmr.store.stored_batches import (
    LateAttrs,
    LateEnd,
    encode_attributes,
    encode_chunks,
    methods_by_seq,
)
from cmr.store.summaries import SummaryCollector, SummaryParts
from invoseq.wire import Attrs, Batch, End, Error, Event, Handoff, Start

_COMMON: Final = (Start, End)
_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1
#: Where a Batch's thread chunks are in its msgpack array (``_pack.c``'s ``scan_batch``).
_CHUNKS_FIELD: Final = Batch.__struct_fields__.index("chunks")


@dataclass(frozen=True, slots=True)
class PackedBatch:
    chunks: bytes
    events: int
    first_start: dict[bytes, int]  # seq -> its earliest Start in the batch, wall clock
    seqs: set[bytes]  # every sequence with a Start or Handoff in the batch
    methods: dict[bytes, list[int]]  # seq -> the methods its Starts ran, sorted
    seq_methods: dict[bytes, bytes]  # the same, each as a msgpack array
    late_ends: list[LateEnd]
    late_attrs: list[LateAttrs]
    handoffs: list[HandoffRow]
    summary: SummaryParts  # what the batch adds to its sequences' listing lines


def pack(batch: Batch | RawBatch, *, encode: bool = True, body: bytes | None = None) -> PackedBatch:
    """The blob and index of ``batch``. Raises InvalidBatchError when a wall-clock time does not
    fit a signed 64-bit integer (nothing of the batch may then be stored), or when ``batch`` is a
    ``RawBatch`` whose events the protocol refuses. Without ``encode`` (a store that keeps the
    decoded chunks) the blob and ``seq_methods`` are left empty. ``body``, the msgpack ``batch``
    was decoded from, when the caller has it: its thread chunks are then the blob as they came
    (with the C pass), not encoded again."""
    if accelerator is None:
        return _pack_events(
            raw_batch.typed(batch) if isinstance(batch, RawBatch) else batch, encode=encode
        )
    return _pack_scanned(batch, encode=encode, accel=accelerator, body=body)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A batch ready to be written: where its outcome goes, its index and its samples. ``batch``
    is the batch without its thread chunks: they are in ``stored_batches`` (the blob and its
    index)."""

    at: int
    batch: Batch
    packed: PackedBatch
    samples: list[SampleRecord]


class Preparation:
    """The batches of a group commit, packed one by one as they are decoded, before the
    transaction begins: a batch refused (``InvalidBatchError``) has its error as outcome and
    nothing of it is written, the others are ``False`` until written. Each prepared batch keeps
    no decoded event (``Prepared.batch``), so a caller that drops a batch once added holds one
    batch's events at a time, not the group's: the next decode reuses memory still in cache."""

    __slots__ = ("outcomes", "prepared")

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []
        self.prepared: list[Prepared] = []

    def add(self, batch: Batch | RawBatch, body: bytes | None = None) -> None:
        """Pack ``batch`` (``body``: the msgpack it was decoded from, if known)."""
        at = len(self.outcomes)
        if isinstance(batch, RawBatch):
            headed = raw_batch.header(batch)
        else:
            headed = msgspec.structs.replace(batch, chunks=[])
        try:
            packed, samples = pack(batch, body=body), sample_records(headed)
        except InvalidBatchError as exc:
            self.outcomes.append(exc)
            return
        self.prepared.append(Prepared(at, headed, packed, samples))
        self.outcomes.append(False)

    def in_write_order(self) -> list[Prepared]:
        """The prepared batches in the order every node writes them, process by process: two
        nodes' groups take their processes' rows in the same order (PostgreSQL)."""
        return sorted(self.prepared, key=lambda ready: (ready.batch.puid, ready.batch.batch_no))


def prepare(batches: Sequence[Batch], bodies: Sequence[bytes] | None = None) -> Preparation:
    """``batches`` prepared (``bodies``: the msgpack each was decoded from, if known)."""
    group = Preparation()
    for at, batch in enumerate(batches):
        group.add(batch, None if bodies is None else bodies[at])
    return group


def write_each(
    prepared: Sequence[Prepared], outcomes: list[Outcome], write: Callable[[Prepared], bool]
) -> list[PackedBatch]:
    """Write the ``prepared`` batches of a transaction in order with ``write`` (False: the batch
    was stored before, and nothing of it is written again), each outcome set; the packs of the
    batches written, whose summaries the store then writes once (``grouping.group_parts``),
    after every batch's late Ends."""
    written: list[PackedBatch] = []
    for ready in prepared:
        outcomes[ready.at] = fresh = write(ready)
        if fresh:
            written.append(ready.packed)
    return written


class PackingStore(GroupCommitStore):
    """A store that writes batches as blobs and their index (SQLite, PostgreSQL): it takes a
    group prepared by the caller (``Preparation``), which can pack each batch as it decodes it
    (``cmr.server.ingest``)."""

    def ingest_many(
        self,
        batches: Sequence[Batch],
        received_ns: int,
        bodies: Sequence[bytes] | None = None,
    ) -> list[Outcome]:
        return self.ingest_prepared(prepare(batches, bodies), received_ns)

    @abc.abstractmethod
    def ingest_prepared(self, group: Preparation, received_ns: int) -> list[Outcome]:
        """As ``ingest_many`` for a prepared group: its outcomes, each batch's set (True stored,
        False stored before, or the error that refused it)."""


def _pack_events(batch: Batch, *, encode: bool) -> PackedBatch:
    """``pack`` in Python, the reference: comprehensions split each chunk by type, and set and
    dict operations do the rest."""
    puid = batch.puid
    offset = batch.process.clock_offset_ns
    first_start: dict[bytes, int] = {}
    seq_methods: set[tuple[bytes, int]] = set()
    start_iids: dict[int, bytes] = {}  # iid -> sequence, of the batch's Starts
    ends: list[End] = []
    rare: list[Error | Handoff | Attrs] = []
    times: list[int] = []
    events = 0
    summary = SummaryCollector(puid, offset)
    for chunk in batch.chunks:
        chunk_events = chunk.events
        events += len(chunk_events)
        starts = [e for e in chunk_events if type(e) is Start]
        chunk_ends = [e for e in chunk_events if type(e) is End]
        if len(starts) + len(chunk_ends) != len(chunk_events):
            rare.extend([e for e in chunk_events if type(e) not in _COMMON])  # type: ignore[misc]
        ends += chunk_ends
        times += [e.t_ns for e in chunk_ends]
        if not starts:
            continue
        start_times = [e.t_ns for e in starts]
        times += start_times
        earliest = _earliest(starts, start_times)
        for seq, event in earliest.items():
            known = first_start.get(seq)
            first_start[seq] = event.t_ns if known is None else min(known, event.t_ns)
        summary.add_chunk(chunk.tid, starts, earliest)
        seq_methods.update([(e.seq, e.method) for e in starts])
        start_iids.update([(e.iid, e.seq) for e in starts])
    seqs = set(first_start)
    methods = methods_by_seq(seq_methods)
    late_ends: list[LateEnd] = [
        (puid, e.iid, e.t_ns + offset, None) for e in ends if e.iid not in start_iids
    ]
    late_attrs: list[LateAttrs] = []
    handoffs: list[HandoffRow] = []
    for other in rare:
        if isinstance(other, Attrs):
            if other.iid not in start_iids:
                attributes = encode_attributes(other.attributes)
                late_attrs.append((puid, other.iid, batch.batch_no, attributes))
            continue
        times.append(other.t_ns)
        if isinstance(other, Handoff):
            seqs.add(other.seq)
            submitted_ns = other.t_ns + offset
            handoffs.append(
                (other.hid, other.seq, puid, other.parent, other.kind, other.method, submitted_ns)
            )
        elif other.iid not in start_iids:
            late_ends.append((puid, other.iid, other.t_ns + offset, other.error))
    _check_times(batch, times, offset)
    return PackedBatch(
        chunks=encode_chunks(batch.chunks) if encode else b"",
        events=events,
        first_start={seq: t_ns + offset for seq, t_ns in first_start.items()},
        seqs=seqs,
        methods=methods,
        seq_methods={seq: encode_chunks(ids) for seq, ids in methods.items()} if encode else {},
        late_ends=late_ends,
        late_attrs=late_attrs,
        handoffs=handoffs,
        summary=summary.finish(ends, [e for e in rare if type(e) is Error], start_iids),
    )


def _pack_scanned(
    batch: Batch | RawBatch, *, encode: bool, accel: ModuleType, body: bytes | None = None
) -> PackedBatch:
    """``pack`` with the C pass: ``scan_batch`` reads the chunks in ``body`` (kept as the blob),
    or ``scan`` the chunks encoded again, and makes the per-sequence parts with the batch's
    clock offset added (issue 33: made here, they cost a request-shaped batch more than the C
    pass); the rest is per rare event, per hand-off entry or per invocation left open. A
    ``RawBatch``'s rare events are decoded typed here, chunk by chunk (``raw_batch``)."""
    puid, offset, batch_no = batch.puid, batch.process.clock_offset_ns, batch.batch_no
    blob, found = _scan(batch, encode=encode, accel=accel, body=body)
    events, t_min, t_max, seqs, roots, counts, threads, first_start = found[:8]
    methods, seq_methods, opened, entries, late, rare = found[8:]
    times = [] if t_min is None else [t_min, t_max]
    late_ends: list[LateEnd] = [(puid, iid, t_ns + offset, None) for iid, t_ns in late]
    late_attrs: list[LateAttrs] = []
    handoffs: list[HandoffRow] = []
    errors: dict[int, Error] = {}  # the last Error of each iid with a Start in the batch
    events_of = _events_of(batch)
    for chunk_at, event_at, in_batch in rare:
        event = events_of(chunk_at)[event_at]
        if isinstance(event, Attrs):
            if not in_batch:
                attributes = encode_attributes(event.attributes)
                late_attrs.append((puid, event.iid, batch_no, attributes))
            continue
        times.append(event.t_ns)
        if isinstance(event, Handoff):
            seqs.add(event.seq)
            handoffs.append(
                (
                    event.hid,
                    event.seq,
                    puid,
                    event.parent,
                    event.kind,
                    event.method,
                    event.t_ns + offset,
                )
            )
        elif isinstance(event, Error):
            if in_batch:
                errors[event.iid] = event
            else:
                late_ends.append((puid, event.iid, event.t_ns + offset, event.error))
    _check_times(batch, times, offset)

    def end_of(iid: int, end_ns: int | None) -> tuple[int | None, str | None]:
        error = errors.get(iid)
        if error is not None:
            return error.t_ns + offset, error.error
        return (None if end_ns is None else end_ns + offset), None

    if errors:  # rare: a root that raised takes its Error's end and exception
        roots = [(*row[:7], *end_of(row[5], None)) if row[5] in errors else row for row in roots]
    summary = SummaryParts(
        counts=Counter(counts),
        threads=threads,
        roots=roots,
        entries=[
            (seq, puid, iid, hid, end_of(iid, end_ns)[0]) for seq, iid, hid, end_ns in entries
        ],
        opened=[(puid, iid, seq) for iid, seq in opened if iid not in errors],
    )
    return PackedBatch(
        chunks=blob if encode else b"",
        events=events,
        first_start=first_start,
        seqs=seqs,
        methods=methods,
        seq_methods=seq_methods,
        late_ends=late_ends,
        late_attrs=late_attrs,
        handoffs=handoffs,
        summary=summary,
    )


def _scan(
    batch: Batch | RawBatch, *, encode: bool, accel: ModuleType, body: bytes | None
) -> tuple[bytes, tuple[Any, ...]]:
    """The blob and the C pass's findings (``_columns.pyi``'s ``Scanned``): read in ``body``
    when given, else in the chunks encoded again."""
    puid, offset = batch.puid, batch.process.clock_offset_ns
    try:
        if body is not None:
            try:
                blob, found = accel.scan_batch(body, _CHUNKS_FIELD, puid, offset, encode)
                return blob, found
            except ValueError:  # msgspec read what the C reader cannot (nesting): encode again
                pass
        if isinstance(batch, RawBatch):  # what the C pass refused, msgspec's typed decode judges
            batch = raw_batch.typed(batch)
        blob = encode_chunks(batch.chunks)
        return blob, accel.scan(blob, puid, offset, encode)
    except OverflowError:  # a Start's or End's time plus the offset
        raise _out_of_range(batch) from None


def _events_of(batch: Batch | RawBatch) -> Callable[[int], Sequence[Event]]:
    """The events of a chunk of ``batch`` by its position; a ``RawBatch``'s decoded typed, once
    a chunk (raising InvalidBatchError when msgspec refuses them)."""
    if not isinstance(batch, RawBatch):
        return lambda at: batch.chunks[at].events
    raw, chunks = batch, batch.chunks
    decoded: dict[int, list[Event]] = {}

    def events_of(at: int) -> list[Event]:
        found = decoded.get(at)
        if found is None:
            found = decoded[at] = raw_batch.events(chunks[at], raw)
        return found

    return events_of


def _check_times(batch: Batch | RawBatch, times: list[int], offset: int) -> None:
    """Raises InvalidBatchError when one of ``times`` does not fit a signed 64-bit integer once
    ``offset`` (the batch's clock offset) is added."""
    if times and not (min(times) + offset >= _I64_MIN and max(times) + offset <= _I64_MAX):
        raise _out_of_range(batch)


def _out_of_range(batch: Batch | RawBatch) -> InvalidBatchError:
    return InvalidBatchError(f"batch {batch.batch_no} of process {batch.puid:x}: time out of range")


def _earliest(starts: list[Start], times: list[int]) -> dict[bytes, Start]:
    """The earliest of ``starts`` (``times`` are their times) of each sequence; of two at the
    same time, the lower iid (``root_rank``'s order)."""
    if all(map(operator.lt, times, itertools.islice(times, 1, None))):  # as a thread records
        return {e.seq: e for e in reversed(starts)}  # them: a sequence's first is its earliest
    earliest: dict[bytes, Start] = {}
    for event in starts:
        known = earliest.get(event.seq)
        if known is None or (event.t_ns, event.iid) < (known.t_ns, known.iid):
            earliest[event.seq] = event
    return earliest

"""Batches stored as they arrived: one blob of thread chunks per batch, and a small index.

Ingest used to turn every event into a table row, and SQL calls per event bounded it. Now a batch's
thread chunks are stored as one msgpack blob in the form the sender encoded them (re-encoded from
the validated structs, event times still on the process's monotonic clock, the batch's clock
offset beside the blob), and the store indexes only what lookups need, all of it small next to
the events:

- the sequences each batch holds (from its Starts and Handoffs), so a sequence's tree reads its
  own batches and nothing else, and each sequence's earliest start (listing order);
- the (sequence, method) pairs of its Starts, for ``find_sequences``;
- *late* Ends and Attrs: those whose Start is not in the same batch (a call that outlived a
  batch, or an End that arrived first). A sequence's batches hold its Starts but not these, so
  they are kept apart, keyed by (puid, iid), already in wall-clock time;
- hand-offs, as before (they are looked up by ``hid`` across sequences).

``batch_index.pack`` does that in one pass over the events (in C when it is built); ``unpack`` turns
a sequence's blobs (plus the late records asked for) back into invocation records. The rules
(first write wins for an event key; wall time = event time + the batch's clock offset; a batch
whose wall times overflow a signed 64-bit integer is refused whole) are those of the row stores.
"""

from __future__ import annotations

import collections
import itertools
import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from cmr.store.base import InvocationRecord
from cmr.store.summaries import BatchCache
from invoseq.wire import Attrs, End, Error, Start, ThreadChunk

_COMMON: Final = (Start, End)
_COMMON_SET: Final = frozenset(_COMMON)
_IID: Final = operator.attrgetter("iid")
_RECORD_ORDER: Final = operator.attrgetter("start_ns", "puid", "iid")
_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1

encode_chunks = msgspec.msgpack.Encoder().encode
#: The blob was validated when its batch arrived; decoding it typed again costs little and keeps
#: a damaged file from turning into nonsense silently.
_decode_chunks = msgspec.msgpack.Decoder(list[ThreadChunk]).decode
_decode_methods = msgspec.msgpack.Decoder(list[int]).decode
_encode_json = msgspec.json.Encoder().encode
#: Late attributes as stored; a null: a float JSON has no number for, as an earlier version stored
#: it (``encode_attributes`` keeps its text now), read as ``NOT_FINITE``.
_decode_json = msgspec.json.Decoder(dict[str, str | int | float | bool | None]).decode
#: What a non-finite float stored as JSON's null reads as (its sign and kind were lost).
NOT_FINITE: Final = "not finite"

Attributes = dict[str, str | int | float | bool]
#: (puid, iid, end_ns, error): an End or Error whose Start is not in its batch, in wall time.
LateEnd = tuple[int, int, int, str | None]
#: (puid, iid, batch_no, attributes as JSON): an Attrs whose Start is not in its batch.
LateAttrs = tuple[int, int, int, bytes]
#: (puid, batch_no, clock_offset_ns, chunks blob): one stored batch.
StoredBatch = tuple[int, int, int, bytes]
#: The batch number of the batch holding a process's rows stored before batches were (a
#: repository upgraded from a row per event), far above any batch a process sends.
LEGACY_BATCH_NO: Final = 2**62
#: (iid, seq, parent, hid, tid, method, start_ns, end_ns, error): an invocation stored as a row.
LegacyRow = tuple[int, bytes, int, int, int, int, int, int | None, str | None]


#: Given the (puid, iid) keys still missing an End (or asked for Attrs), the late records.
LateEnds = Callable[[list[tuple[int, int]]], Iterable[LateEnd]]
#: Given the processes of a sequence's invocations, their late Attrs (a handful, if any).
LateAttributes = Callable[[set[int]], Iterable[LateAttrs]]


def encode_attributes(attributes: dict[str, str | int | float | bool]) -> bytes:
    """Late attributes as stored, in JSON: a float JSON has no number for (``inf``, ``-inf``,
    ``nan``: a sender may send one) kept as its text, where JSON's null would not read back as
    an attribute value."""
    if any(isinstance(v, float) and not math.isfinite(v) for v in attributes.values()):
        attributes = {
            k: repr(v) if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in attributes.items()
        }
    return _encode_json(attributes)


def decode_attributes(blob: bytes) -> Attributes:
    """Late attributes as ``encode_attributes`` stored them (a null: ``NOT_FINITE``)."""
    found = _decode_json(blob)
    if None in found.values():
        return {k: NOT_FINITE if v is None else v for k, v in found.items()}
    return found  # type: ignore[return-value]  # no None among them


def unpack(
    seq: bytes,
    batches: Iterable[StoredBatch],
    late_ends: LateEnds,
    late_attrs: LateAttributes,
    cache: BatchCache | None = None,
) -> list[InvocationRecord]:
    """The invocations of ``seq`` from its stored batches (in ascending (puid, batch_no) order,
    so the first write of an event key wins), completed with the late Ends and Attrs they lack.
    Sorted by (start_ns, puid, iid). ``cache`` keeps decoded batches for the next call (listing
    many sequences that share batches decodes each batch once).

    Built for a million calls: events are gathered per process, keyed by iid alone, and each
    record is made once, straight from its Start, as soon as its batch is read: only the records
    are kept, and the Ends not matched yet (a call that outlived its batch is completed at the
    end)."""
    gathered: dict[int, _Gathered] = {}
    for puid, batch_no, offset, blob in batches:
        known = None if cache is None else cache.get((puid, batch_no))
        chunks = _decode_chunks(blob) if known is None else known
        if cache is not None:
            cache[puid, batch_no] = chunks
        process = gathered.get(puid)
        if process is None:
            process = gathered[puid] = _Gathered()
        for chunk in chunks:
            process.scan(seq, offset, chunk)
        process.make_records(puid)  # now: the batch's decoded events need not be kept
    records: list[InvocationRecord] = []
    for puid, process in gathered.items():
        records += process.records(puid)
    missing = [(r.puid, r.iid) for r in records if r.end_ns is None]
    late = {(puid, iid): (end_ns, error) for puid, iid, end_ns, error in late_ends(missing)}
    attributes: dict[Key, Attributes] = {
        (puid, iid): found
        for puid, process in gathered.items()
        for iid, found in process.attributes.items()
    }
    for puid, iid, _batch_no, blob in sorted(late_attrs(set(gathered)), key=lambda row: row[2]):
        attributes.setdefault((puid, iid), {}).update(decode_attributes(blob))
    if late or attributes:
        records = [_completed(r, late, attributes) for r in records]
    starts = [r.start_ns for r in records]
    if not all(map(operator.lt, starts, itertools.islice(starts, 1, None))):
        records.sort(key=_RECORD_ORDER)
    return records


def _completed(
    record: InvocationRecord, late: dict[Key, tuple[int, str | None]], attributes: dict[Key, Any]
) -> InvocationRecord:
    """``record`` with its late End and its Attrs, if it has any."""
    key = (record.puid, record.iid)
    end = late.get(key) if record.end_ns is None else None
    found = attributes.get(key)
    if end is None and found is None:
        return record
    if end is None:
        return msgspec.structs.replace(record, attributes=found)
    return msgspec.structs.replace(record, end_ns=end[0], error=end[1], attributes=found)


Key = tuple[int, int]  # (puid, iid)


class _Gathered:
    """What ``unpack`` collects of one process from a sequence's stored chunks: its records (made
    batch by batch), the Ends, Errors and Attrs not matched to one yet (the first write of an iid
    wins), and the records still waiting for their End."""

    __slots__ = ("attributes", "ends", "errors", "made", "starts", "waiting")

    def __init__(self) -> None:
        self.starts: list[tuple[int, int, list[Start]]] = []  # this batch's (tid, offset, Starts)
        self.ends: dict[int, int] = {}  # iid -> end, wall clock
        self.errors: dict[int, str] = {}  # iid -> exception type, for ends that were Errors
        self.attributes: dict[int, Attributes] = {}
        self.made: list[InvocationRecord] = []
        self.waiting: list[int] = []  # positions in ``made`` of records made without an End

    def scan(self, seq: bytes, offset: int, chunk: ThreadChunk) -> None:
        """Comprehensions over the chunk, one per kind of event (most chunks hold only Starts
        and Ends); within the chunk the first End of an iid wins (built from the reversed list),
        and across chunks the earlier chunk's."""
        events = chunk.events
        kinds = set(map(type, events))  # one pass at C speed: which comprehensions are needed
        if Start in kinds:
            starts = [e for e in events if type(e) is Start and e.seq == seq]
            if starts:
                self.starts.append((chunk.tid, offset, starts))
        ends = (
            {e.iid: e.t_ns + offset for e in reversed(events) if type(e) is End}
            if End in kinds
            else {}
        )
        errors: dict[int, str] = {}
        rare = [e for e in events if type(e) not in _COMMON] if len(kinds - _COMMON_SET) else []
        for event in rare:  # Errors, Attrs, Handoffs
            if isinstance(event, Error):
                if event.iid not in ends:
                    ends[event.iid] = event.t_ns + offset
                    errors[event.iid] = event.error
            elif isinstance(event, Attrs):
                self.attributes.setdefault(event.iid, {}).update(event.attributes)
        known = self.ends
        if known.keys().isdisjoint(ends):
            known.update(ends)
            self.errors.update(errors)
        else:
            for iid, end_ns in ends.items():
                if iid not in known:
                    known[iid] = end_ns
                    if iid in errors:
                        self.errors[iid] = errors[iid]

    def make_records(self, puid: int) -> None:
        """A record for each Start scanned since the last call, with its End if one was read;
        the Ends they took are let go (a record keeps its own)."""
        if not self.starts:
            return
        ends, errors = self.ends, self.errors
        get_end, get_error = ends.get, errors.get
        first = len(self.made)
        for tid, offset, starts in self.starts:
            self.made += [
                InvocationRecord(
                    puid,
                    e.iid,
                    e.parent,
                    e.hid,
                    tid,
                    e.method,
                    e.t_ns + offset,
                    get_end(e.iid),
                    get_error(e.iid),
                )
                for e in starts
            ]
        self.starts = []
        made = self.made[first:]
        self.waiting += [first + i for i, record in enumerate(made) if record.end_ns is None]
        taken = list(map(_IID, made))
        collections.deque(map(ends.pop, taken, itertools.repeat(None)), maxlen=0)
        if errors:
            collections.deque(map(errors.pop, taken, itertools.repeat(None)), maxlen=0)

    def records(self, puid: int) -> list[InvocationRecord]:
        """One record per iid (its first Start), with its first End if one was gathered."""
        self.make_records(puid)
        made, ends, errors = self.made, self.ends, self.errors
        if len(set(map(_IID, made))) < len(made):  # a Start repeated: the first wins
            return self._first_of_each()
        for i in self.waiting:  # an End read in a later batch than its Start
            end_ns = ends.get(made[i].iid)
            if end_ns is not None:
                made[i] = msgspec.structs.replace(
                    made[i], end_ns=end_ns, error=errors.get(made[i].iid)
                )
        return made

    def _first_of_each(self) -> list[InvocationRecord]:
        """The first record of each iid, with the first End of that iid: the one the earliest
        record made with an End took (each took the first End not taken yet), else the one
        still gathered."""
        made, ends, errors = self.made, self.ends, self.errors
        waiting = set(self.waiting)
        first: dict[int, InvocationRecord] = {}
        taken: dict[int, tuple[int | None, str | None]] = {}
        for i, record in enumerate(made):
            first.setdefault(record.iid, record)
            if i not in waiting:
                taken.setdefault(record.iid, (record.end_ns, record.error))
        for iid in [iid for iid in first if iid not in taken and iid in ends]:
            taken[iid] = (ends[iid], errors.get(iid))
        return [
            msgspec.structs.replace(record, end_ns=taken[iid][0], error=taken[iid][1])
            if iid in taken
            else record
            for iid, record in first.items()
        ]


@dataclass(frozen=True, slots=True)
class LegacyBatch:
    """One process's invocations stored as rows, as one stored batch (clock offset 0: the times
    are wall clock already) and its index."""

    chunks: bytes
    events: int
    seqs: list[bytes]
    seq_methods: dict[bytes, bytes]


def legacy_batch(rows: Iterable[LegacyRow]) -> LegacyBatch:
    """The batch of one process's invocation rows (each iid once), its Starts in each thread's
    order of time."""
    by_thread: dict[int, list[tuple[int, int, Start, End | Error | None]]] = {}
    seq_methods: set[tuple[bytes, int]] = set()
    events = 0
    for iid, seq, parent, hid, tid, method, start_ns, end_ns, error in rows:
        end: End | Error | None = None
        if end_ns is not None:
            end = Error(iid, end_ns, error) if error is not None else End(iid, end_ns)
        start = Start(iid, parent, hid, method, start_ns, seq)
        by_thread.setdefault(tid, []).append((start_ns, iid, start, end))
        events += 1 if end is None else 2
        seq_methods.add((seq, method))
    chunks = []
    for tid, calls in sorted(by_thread.items()):
        calls.sort(key=operator.itemgetter(0, 1))
        chunk_events: list[Start | End | Error] = []
        for _t, _iid, start, end in calls:
            chunk_events.append(start)
            if end is not None:
                chunk_events.append(end)
        chunks.append(ThreadChunk(tid, chunk_events))  # type: ignore[arg-type]
    return LegacyBatch(
        chunks=encode_chunks(chunks),
        events=events,
        seqs=sorted({seq for seq, _ in seq_methods}),
        seq_methods={seq: encode_chunks(ids) for seq, ids in methods_by_seq(seq_methods).items()},
    )


def methods_by_seq(pairs: set[tuple[bytes, int]]) -> dict[bytes, list[int]]:
    """(seq, method) pairs grouped: per sequence, its sorted method ids."""
    grouped: dict[bytes, list[int]] = {}
    for seq, method in pairs:
        grouped.setdefault(seq, []).append(method)
    return {seq: sorted(methods) for seq, methods in grouped.items()}


def methods_of(blob: bytes) -> list[int]:
    """The method ids of a ``PackedBatch.seq_methods`` value."""
    return _decode_methods(blob)

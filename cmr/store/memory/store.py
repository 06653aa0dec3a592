"""A repository that lives in dictionaries: for `tracer run --memory` and for tests.

It keeps batches as they arrived, as the SQL stores do (``cmr.store.stored_batches``), but decoded:
a batch's thread chunks are kept as the structs the server decoded, with the index and listing
lines ``pack`` makes, so ingest costs ``pack``'s pass and a few dictionary updates, and a tree is
``unpack`` of its own batches without decoding them again. The same functions as the SQL
stores', so the three agree by construction on every rule the contract tests check.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Sequence

from cmr.store._samples import sample_records, sample_windows, without_gaps
from cmr.store.base import (
    HandoffRecord,
    InvocationRecord,
    MethodRecord,
    Neighbours,
    OnStep,
    ProcessRecord,
    PruneResult,
    SequenceData,
    SequenceQuery,
    SequenceSummary,
    Store,
    StoreError,
    StoreStats,
    ThreadRecord,
    UnknownSequenceError,
    names_method,
)
from cmr.store.batch_index import pack
from cmr.store.columns import columns_available, distinct_values, process_pairs, read_records
from cmr.store.listing import matching_names, select_lines, window
from cmr.store.memory.lossy import LossyMarks
from cmr.store.memory.pages import MemoryPages
from cmr.store.memory.samples import MemorySamples
from cmr.store.memory.summaries import LateEnd, MemorySummaries
from cmr.store.rules import (
    SHOWN_MATCHES,
    HandoffRow,
    check_limit,
    is_lost,
    lost_rows,
    lost_window_rows,
    neighbours_in,
    pick_match,
    qualified_name,
    seq_range,
)
from cmr.store.stored_batches import LateAttrs
from cmr.store.stored_batches import LateEnd as StoredLateEnd
from cmr.store.summaries import BatchCache
from invoseq.wire import Batch

Key = tuple[int, int]


class MemoryStore(Store):
    """A repository in memory, lost when the process exits. Thread-safe under one lock.

    ``clock`` (wall-clock nanoseconds) tells reads how long a process has been silent."""

    def __init__(self, *, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._batches: dict[Key, int] = {}  # (puid, batch_no) -> when it was received
        # (puid, batch_no) -> its thread chunks: encoded, as SQLite stores them, when the C reader
        # reads them (``columns``: it reads a big sequence faster from its blobs than Python
        # makes records from decoded chunks, and a blob is a fifth of the chunks' memory);
        # otherwise decoded, so that reading decodes nothing.
        self._columns = columns_available()
        self._blobs: dict[Key, bytes] = {}
        self._chunks: BatchCache = {}
        self._offsets: dict[Key, int] = {}  # (puid, batch_no) -> its clock offset
        self._processes: dict[int, ProcessRecord] = {}
        self._methods: dict[Key, MethodRecord] = {}
        self._threads: dict[Key, ThreadRecord] = {}
        self._batch_seqs: dict[bytes, list[Key]] = {}  # seq -> its batches, as they arrived
        self._seq_methods: dict[bytes, set[Key]] = {}  # seq -> (puid, method) its Starts ran
        self._late_ends: dict[Key, LateEnd] = {}  # (puid, iid) -> (end_ns, error)
        self._late_attrs: dict[int, list[LateAttrs]] = {}  # puid -> its late Attrs
        self._handoffs: dict[int, HandoffRow] = {}
        self._handoffs_by_seq: dict[bytes, list[HandoffRow]] = {}
        self._lossy = LossyMarks()
        self._summaries = MemorySummaries()
        self._rejected: dict[str, int] = {}
        self._samples = MemorySamples()
        self._batch_count = 0
        self._duplicate_count = 0
        self._event_count = 0

    # -- write side -----------------------------------------------------------------------

    def ingest(self, batch: Batch, received_ns: int) -> bool:
        packed = pack(batch, encode=self._columns)  # may raise; nothing below can: all or none
        samples = sample_records(batch)
        lost = lost_rows(batch)
        windows = lost_window_rows(batch)
        with self._lock:
            self._check_open()
            puid = batch.puid
            key = (puid, batch.batch_no)
            if key in self._batches:
                self._duplicate_count += 1
                return False
            self._batches[key] = received_ns
            if self._columns:
                self._blobs[key] = packed.chunks
            else:
                self._chunks[key] = batch.chunks
            self._offsets[key] = batch.process.clock_offset_ns
            self._merge_process(batch, received_ns)
            for m in batch.methods:
                self._methods[puid, m.method] = MethodRecord(m.module, m.qualname, m.file, m.line)
            for t in batch.threads:
                self._threads[puid, t.tid] = ThreadRecord(t.native_id, t.name)
            for seq in packed.seqs:
                self._batch_seqs.setdefault(seq, []).append(key)
            for seq, methods in packed.methods.items():
                self._seq_methods.setdefault(seq, set()).update([(puid, m) for m in methods])
            late_ends = self._late_ends
            for _puid, iid, end_ns, error in packed.late_ends:
                late_ends.setdefault((puid, iid), (end_ns, error))  # first write wins
            if packed.late_attrs:
                self._late_attrs.setdefault(puid, []).extend(packed.late_attrs)
            for handoff in packed.handoffs:
                if self._handoffs.setdefault(handoff[0], handoff) is handoff:
                    self._handoffs_by_seq.setdefault(handoff[1], []).append(handoff)
            closed = [(puid, row[1]) for row in packed.late_ends]
            self._summaries.add(
                packed.first_start, packed.summary, closed, late_ends, self._methods
            )
            self._lossy.add(lost, windows)
            self._samples.add(batch, samples)
            self._batch_count += 1
            self._event_count += packed.events
        return True

    def _merge_process(self, batch: Batch, received_ns: int) -> None:
        known = self._processes.get(batch.puid)
        if known is None:
            info = batch.process
            self._processes[batch.puid] = ProcessRecord(
                puid=batch.puid,
                pid=info.pid,
                host=info.host,
                platform_id=info.platform_id,
                argv=tuple(info.argv),
                ended=batch.final,
                dropped=batch.dropped,
                last_seen_ns=received_ns,
                heartbeat_ms=info.heartbeat_ms,
            )
        else:
            # As in SQLite: the heartbeat interval of the latest batch received counts.
            latest = received_ns >= known.last_seen_ns
            self._processes[batch.puid] = dataclasses.replace(
                known,
                ended=known.ended or batch.final,
                dropped=max(known.dropped, batch.dropped),
                last_seen_ns=max(known.last_seen_ns, received_ns),
                heartbeat_ms=batch.process.heartbeat_ms if latest else known.heartbeat_ms,
            )

    def record_rejected(self, reason: str, count: int = 1) -> None:
        with self._lock:
            self._check_open()
            self._rejected[reason] = self._rejected.get(reason, 0) + count

    # -- read side ------------------------------------------------------------------------

    def list_sequences(
        self, limit: int, query: SequenceQuery | None = None
    ) -> list[SequenceSummary]:
        check_limit(limit)
        now = self._clock()
        with self._lock:
            self._check_open()
            host = None if query is None else query.host
            names = None
            if query is not None and query.root is not None:  # every method could be a root
                known = {qualified_name(m.module, m.qualname, 0) for m in self._methods.values()}
                names = matching_names(query.root, sorted(known), complete=True)
            page = MemoryPages(
                self._summaries,
                query,
                names,
                window(query),
                on_host=lambda seq: host is None or host in self._hosts_of(seq),
                line=lambda seq: self._summary(seq, now),
            )
            return select_lines(page, limit, query)

    def _summary(self, seq: bytes, now: int) -> SequenceSummary:
        return self._summaries.summary(
            seq,
            late_ends=self._late_ends,
            methods=self._methods,
            handoffs=self._handoffs,
            lossy=self._lossy.lossy(seq, self._summaries),
            process=functools.partial(self._process, now=now),
        )

    def _hosts_of(self, seq: bytes) -> set[str]:
        """The hosts of the processes the sequence ran on."""
        return {self._processes[puid].host for puid in self._summaries.processes_of(seq)}

    def _process(self, puid: int, now: int) -> ProcessRecord:
        """The stored record with ``lost`` as of ``now``."""
        record = self._processes[puid]
        lost = is_lost(
            ended=record.ended,
            heartbeat_ms=record.heartbeat_ms,
            last_seen_ns=record.last_seen_ns,
            now_ns=now,
        )
        return dataclasses.replace(record, lost=True) if lost else record

    def resolve_sequence(self, prefix: str) -> bytes:
        wanted = seq_range(prefix)
        with self._lock:
            self._check_open()
            matches = sorted(seq for seq in self._summaries.starts() if wanted.contains(seq))
        return pick_match(wanted, len(matches), matches[:SHOWN_MATCHES])

    def neighbours(self, seqs: Sequence[bytes]) -> dict[bytes, Neighbours]:
        with self._lock:
            self._check_open()
            ordered = sorted(self._summaries.starts())
        return neighbours_in(ordered, seqs)

    def load_sequence(self, seq: bytes, *, samples: bool = True) -> SequenceData:
        now = self._clock()
        with self._lock:
            self._check_open()
            return self._data(seq, now, samples=samples)

    def _data(self, seq: bytes, now: int, *, samples: bool) -> SequenceData:
        """``load_sequence`` under the lock the caller holds."""
        invocations = self._invocations(seq)
        if not invocations:
            raise UnknownSequenceError(f"no sequence {seq.hex()}")
        handoffs = self._sequence_handoffs(seq, invocations)
        wanted_methods, wanted_threads = process_pairs(invocations, "method", "tid")
        wanted_methods.update((h.puid, h.method) for h in handoffs.values())
        methods = {key: self._methods[key] for key in wanted_methods if key in self._methods}
        threads = {key: self._threads[key] for key in wanted_threads if key in self._threads}
        lost_windows = self._lossy.windows_of(seq, self._summaries)
        lost_by = self._lossy.named_by(seq).union(lost_windows)
        puids = distinct_values(invocations, "puid") | {h.puid for h in handoffs.values()} | lost_by
        processes = {puid: self._process(puid, now) for puid in sorted(puids)}
        sampled, frames = (
            self._samples.overlapping(sample_windows(invocations, self._samples.threads()))
            if samples
            else ([], {})
        )
        sampled, gaps = without_gaps(sampled)
        return SequenceData(
            seq, invocations, methods, threads, processes, handoffs, sampled, frames, lost_by,
            gaps=gaps, lost_windows=lost_windows,
        )  # fmt: skip

    def _invocations(self, seq: bytes) -> Sequence[InvocationRecord]:
        """The sequence's records, read from its batches as kept (blobs or decoded chunks)."""
        late_ends = self._late_ends
        offsets, blobs = self._offsets, self._blobs
        keys = sorted(self._batch_seqs.get(seq, ()))

        def asked_ends(asked: list[Key]) -> list[StoredLateEnd]:
            return [(*key, *late_ends[key]) for key in asked if key in late_ends]

        def asked_attrs(puids: set[int]) -> list[LateAttrs]:
            return [row for puid in puids for row in self._late_attrs.get(puid, ())]

        stored = [(*key, offsets[key], blobs.get(key, b"")) for key in keys]
        # Without the reader every batch is in the cache, decoded: nothing is decoded again.
        cache = None if self._columns else self._chunks
        return read_records(seq, stored, asked_ends, asked_attrs, cache)

    def find_sequences(self, method: str, *, since_ns: int | None, limit: int) -> list[bytes]:
        check_limit(limit)
        with self._lock:
            self._check_open()
            wanted = {
                key
                for key, record in self._methods.items()
                if names_method(record.module, record.qualname, method)
            }
            recent = sorted(
                (
                    (start_ns, seq)
                    for seq, start_ns in self._summaries.starts().items()
                    if since_ns is None or start_ns >= since_ns
                ),
                reverse=True,
            )
            found: list[bytes] = []
            for _start_ns, seq in recent:
                if len(found) >= limit:
                    break
                if not wanted.isdisjoint(self._seq_methods.get(seq, ())):
                    found.append(seq)
            return found

    def _sequence_handoffs(
        self, seq: bytes, invocations: Sequence[InvocationRecord]
    ) -> dict[int, HandoffRecord]:
        """Those recorded in the sequence, and those its invocations continue (by hid alone)."""
        rows = list(self._handoffs_by_seq.get(seq, ()))
        hids = distinct_values(invocations, "hid")
        rows += [self._handoffs[hid] for hid in sorted(hids) if hid and hid in self._handoffs]
        return {
            hid: HandoffRecord(hid, puid, parent, kind, method, submitted_ns)
            for hid, _seq, puid, parent, kind, method, submitted_ns in rows
        }

    def prune(self, before_ns: int, *, on_step: OnStep | None = None) -> PruneResult:
        """In memory, quick: ``on_step`` is never called."""
        with self._lock:
            self._check_open()
            starts = self._summaries.starts()
            old = [seq for seq, start_ns in starts.items() if start_ns < before_ns]
            for seq in old:
                self._batch_seqs.pop(seq, None)
                self._seq_methods.pop(seq, None)
                for handoff in self._handoffs_by_seq.pop(seq, []):
                    self._handoffs.pop(handoff[0], None)
                self._lossy.forget_sequence(seq)
                self._summaries.forget(seq)
            # As in SQLite: a batch goes once no sequence it holds is left.
            held = {key for keys in self._batch_seqs.values() for key in keys}
            for key in [k for k, t in self._batches.items() if t < before_ns and k not in held]:
                del self._batches[key]
                self._chunks.pop(key, None)
                self._blobs.pop(key, None)
                self._offsets.pop(key, None)
            # An End before the cutoff belongs to a call that started before it.
            for key in [key for key, end in self._late_ends.items() if end[0] < before_ns]:
                del self._late_ends[key]
            for puid, rows in list(self._late_attrs.items()):
                self._late_attrs[puid] = [row for row in rows if (puid, row[2]) in self._batches]
            samples = self._samples.prune(before_ns)
            gone = [puid for puid, p in self._processes.items() if self._is_gone(p, before_ns)]
            for puid in gone:
                del self._processes[puid]
                self._samples.forget(puid)
                self._late_attrs.pop(puid, None)
                self._lossy.forget_process(puid)
                for table in (self._methods, self._threads, self._late_ends):
                    for key in [key for key in table if key[0] == puid]:
                        del table[key]
        return PruneResult(sequences=len(old), samples=samples, processes=len(gone))

    def _is_gone(self, process: ProcessRecord, before_ns: int) -> bool:
        """Last seen before the cutoff, with nothing of it left."""
        puid = process.puid
        return (
            process.last_seen_ns < before_ns
            and not any(key[0] == puid for key in self._batches)
            and not any(row[2] == puid for row in self._handoffs.values())
            and not self._samples.holds(puid)
            and not self._lossy.names(puid)
        )

    def stats(self) -> StoreStats:
        now = self._clock()
        with self._lock:
            self._check_open()
            processes = sorted(
                (self._process(puid, now) for puid in self._processes),
                key=lambda p: (-p.last_seen_ns, p.puid),
            )
            return StoreStats(
                batches=self._batch_count,
                duplicate_batches=self._duplicate_count,
                events=self._event_count,
                rejected=dict(sorted(self._rejected.items())),
                processes=processes,
                samples=self._samples.count,
                samplers=dict(sorted(self._samples.samplers.items())),
            )

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the in-memory repository is closed")

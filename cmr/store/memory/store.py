"""A repository that lives in dictionaries: for `tracer run`'s embedded repository and for tests.

It keeps the same insert-only shape as the SQLite backend (Start and End rows joined on read) so
the two agree by construction on every rule the contract tests check.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import threading
import time
from collections.abc import Callable

from cmr.store._samples import sample_records, sample_windows
from cmr.store._shared import (
    SHOWN_MATCHES,
    EndRow,
    HandoffRow,
    StartRow,
    check_limit,
    event_rows,
    is_lost,
    lost_rows,
    pick_match,
    seq_range,
)
from cmr.store.base import (
    HandoffRecord,
    InvocationRecord,
    MethodRecord,
    ProcessRecord,
    PruneResult,
    SequenceData,
    SequenceSummary,
    Store,
    StoreError,
    StoreStats,
    ThreadRecord,
    UnknownSequenceError,
    names_method,
)
from cmr.store.memory.samples import MemorySamples
from cmr.store.memory.summaries import MemorySummaries
from tracer.wire import Batch

Key = tuple[int, int]


def _by_start(item: tuple[bytes, int]) -> tuple[int, bytes]:
    """Listing order: by first start, then by id."""
    return item[1], item[0]


class MemoryStore(Store):
    """A repository in memory, lost when the process exits. Thread-safe under one lock.

    ``clock`` (wall-clock nanoseconds) tells reads how long a process has been silent."""

    def __init__(self, *, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._batches: dict[Key, int] = {}  # (puid, batch_no) -> when it was received
        self._processes: dict[int, ProcessRecord] = {}
        self._methods: dict[Key, MethodRecord] = {}
        self._threads: dict[Key, ThreadRecord] = {}
        self._starts: dict[Key, StartRow] = {}
        self._ends: dict[Key, EndRow] = {}
        self._attrs: dict[Key, dict[str, str | int | float | bool]] = {}
        self._by_seq: dict[bytes, list[StartRow]] = {}
        self._handoffs: dict[int, HandoffRow] = {}
        self._handoffs_by_seq: dict[bytes, list[HandoffRow]] = {}
        self._seq_start: dict[bytes, int] = {}
        self._lost_by: dict[bytes, set[int]] = {}  # seq -> processes that dropped its events
        self._summaries = MemorySummaries()
        self._rejected: dict[str, int] = {}
        self._samples = MemorySamples()
        self._batch_count = 0
        self._duplicate_count = 0
        self._event_count = 0

    # -- write side -----------------------------------------------------------------------

    def ingest(self, batch: Batch, received_ns: int) -> bool:
        rows = event_rows(batch)  # may raise; nothing below can, so a batch lands whole or not
        samples = sample_records(batch)
        lost = lost_rows(batch)
        with self._lock:
            self._check_open()
            key = (batch.puid, batch.batch_no)
            if key in self._batches:
                self._duplicate_count += 1
                return False
            self._batches[key] = received_ns
            self._merge_process(batch, received_ns)
            puid = batch.puid
            for m in batch.methods:
                self._methods[puid, m.method] = MethodRecord(m.module, m.qualname, m.file, m.line)
            for t in batch.threads:
                self._threads[puid, t.tid] = ThreadRecord(t.native_id, t.name)
            stored = self._starts.setdefault
            new_starts = [start for start in rows.starts if stored(start[:2], start) is start]
            for start in new_starts:
                self._by_seq.setdefault(start[2], []).append(start)
            ended = self._ends.setdefault
            new_ends = [end[:2] for end in rows.ends if ended(end[:2], end) is end]
            self._summaries.add(new_starts, new_ends, self._ends)
            for puid_, iid, attributes in rows.attrs:
                self._attrs.setdefault((puid_, iid), {}).update(attributes)
            for handoff in rows.handoffs:
                if self._handoffs.setdefault(handoff[0], handoff) is handoff:
                    self._handoffs_by_seq.setdefault(handoff[1], []).append(handoff)
            for seq, start_ns in rows.first_start.items():
                known = self._seq_start.get(seq)
                self._seq_start[seq] = start_ns if known is None else min(known, start_ns)
            for seq, puid in lost:
                self._lost_by.setdefault(seq, set()).add(puid)
            self._samples.add(batch, samples)
            self._batch_count += 1
            self._event_count += rows.count
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

    def list_sequences(self, limit: int) -> list[SequenceSummary]:
        check_limit(limit)
        now = self._clock()
        with self._lock:
            self._check_open()
            recent = heapq.nlargest(limit, self._seq_start.items(), key=_by_start)
            return [
                self._summaries.summary(
                    seq,
                    start_ns,
                    ends=self._ends,
                    methods=self._methods,
                    handoffs=self._handoffs,
                    lossy=bool(self._lost_by.get(seq)),
                    process=functools.partial(self._process, now=now),
                )
                for seq, start_ns in recent
            ]

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
            matches = sorted(seq for seq in self._seq_start if wanted.contains(seq))
        return pick_match(wanted, len(matches), matches[:SHOWN_MATCHES])

    def load_sequence(self, seq: bytes, *, samples: bool = True) -> SequenceData:
        now = self._clock()
        with self._lock:
            self._check_open()
            return self._data(seq, now, samples=samples)

    def _data(self, seq: bytes, now: int, *, samples: bool) -> SequenceData:
        """``load_sequence`` under the lock the caller holds."""
        starts = self._by_seq.get(seq)
        if not starts:
            raise UnknownSequenceError(f"no sequence {seq.hex()}")
        invocations = [self._invocation(start) for start in starts]
        invocations.sort(key=lambda r: (r.start_ns, r.puid, r.iid))
        handoffs = self._sequence_handoffs(seq, starts)
        used = [(s[0], s[6]) for s in starts] + [(h.puid, h.method) for h in handoffs.values()]
        methods = {key: self._methods[key] for key in used if key in self._methods}
        threads = {
            (s[0], s[5]): self._threads[s[0], s[5]] for s in starts if (s[0], s[5]) in self._threads
        }
        lost_by = frozenset(self._lost_by.get(seq, ()))
        processes = {s[0]: self._process(s[0], now) for s in starts}
        for puid in [h.puid for h in handoffs.values()] + sorted(lost_by):
            if puid not in processes:
                processes[puid] = self._process(puid, now)
        sampled, frames = (
            self._samples.overlapping(sample_windows(invocations, self._samples.threads()))
            if samples
            else ([], {})
        )
        return SequenceData(
            seq, invocations, methods, threads, processes, handoffs, sampled, frames, lost_by
        )

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
                    for seq, start_ns in self._seq_start.items()
                    if since_ns is None or start_ns >= since_ns
                ),
                reverse=True,
            )
            found: list[bytes] = []
            for _start_ns, seq in recent:
                if len(found) >= limit:
                    break
                if any((s[0], s[6]) in wanted for s in self._by_seq[seq]):
                    found.append(seq)
            return found

    def _sequence_handoffs(self, seq: bytes, starts: list[StartRow]) -> dict[int, HandoffRecord]:
        """Those recorded in the sequence, and those its invocations continue (by hid alone)."""
        rows = list(self._handoffs_by_seq.get(seq, ()))
        rows += [self._handoffs[s[4]] for s in starts if s[4] and s[4] in self._handoffs]
        return {
            hid: HandoffRecord(hid, puid, parent, kind, method, submitted_ns)
            for hid, _seq, puid, parent, kind, method, submitted_ns in rows
        }

    def _invocation(self, start: StartRow) -> InvocationRecord:
        puid, iid, _seq, parent, hid, tid, method, start_ns = start
        end = self._ends.get((puid, iid))
        return InvocationRecord(
            puid=puid,
            iid=iid,
            parent=parent,
            hid=hid,
            tid=tid,
            method=method,
            start_ns=start_ns,
            end_ns=end[2] if end else None,
            error=end[3] if end else None,
            attributes=self._attrs.get((puid, iid)),
        )

    def prune(self, before_ns: int) -> PruneResult:
        with self._lock:
            self._check_open()
            old = [seq for seq, start_ns in self._seq_start.items() if start_ns < before_ns]
            for seq in old:
                for puid, iid, *_ in self._by_seq.pop(seq, []):
                    self._starts.pop((puid, iid), None)
                    self._ends.pop((puid, iid), None)
                    self._attrs.pop((puid, iid), None)
                for handoff in self._handoffs_by_seq.pop(seq, []):
                    self._handoffs.pop(handoff[0], None)
                self._lost_by.pop(seq, None)
                self._summaries.forget(seq)
                del self._seq_start[seq]
            # An End before the cutoff belongs to a call that started before it (pruned above,
            # or its Start never arrived).
            for key in [key for key, end in self._ends.items() if end[2] < before_ns]:
                del self._ends[key]
            self._batches = {k: t for k, t in self._batches.items() if t >= before_ns}
            samples = self._samples.prune(before_ns)
            gone = [puid for puid, p in self._processes.items() if self._is_gone(p, before_ns)]
            for puid in gone:
                del self._processes[puid]
                self._samples.forget(puid)
                for table in (self._methods, self._threads, self._ends, self._attrs):
                    for key in [key for key in table if key[0] == puid]:
                        del table[key]
        return PruneResult(sequences=len(old), samples=samples, processes=len(gone))

    def _is_gone(self, process: ProcessRecord, before_ns: int) -> bool:
        """Last seen before the cutoff, with nothing of it left."""
        puid = process.puid
        return (
            process.last_seen_ns < before_ns
            and not any(key[0] == puid for key in self._starts)
            and not any(key[0] == puid for key in self._batches)
            and not any(row[2] == puid for row in self._handoffs.values())
            and not self._samples.holds(puid)
            and not any(puid in puids for puids in self._lost_by.values())
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

"""The memory backend's sequence summaries (``cmr.store.summaries``): each batch's parts kept in
dictionaries, by the rules the SQL stores write in their tables (``sqlite_summaries``): the
lowest-ranked root candidate wins, threads and entries are sets (first write wins), an
invocation is open until its late End arrives and never opened when the End came first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field

from cmr.store.base import MethodRecord, ProcessRecord, SequenceSummary
from cmr.store.summaries import EntryRow, RootRow, StoredSummary, SummaryParts, summary_from

Key = tuple[int, int]  # (puid, iid)
#: (end_ns, error) of a late End.
LateEnd = tuple[int, str | None]


@dataclass(slots=True)
class _Summary:
    start_ns: int
    invocations: int = 0
    root: RootRow | None = None
    threads: set[tuple[int, int]] = field(default_factory=set)  # (puid, tid)
    entries: dict[Key, EntryRow] = field(default_factory=dict)
    open: set[Key] = field(default_factory=set)


class MemorySummaries:
    """Per sequence: what its listing line needs, updated per stored batch."""

    def __init__(self) -> None:
        self._by_seq: dict[bytes, _Summary] = {}
        self._open_seq: dict[Key, bytes] = {}  # an open invocation's sequence

    def starts(self) -> dict[bytes, int]:
        """Each sequence's earliest start (the listing order); the caller must not change it."""
        return {seq: summary.start_ns for seq, summary in self._by_seq.items()}

    def processes_of(self, seq: bytes) -> set[int]:
        """The processes the sequence ran on."""
        return {puid for puid, _tid in self._by_seq[seq].threads}

    def add(
        self,
        first_start: Mapping[bytes, int],
        parts: SummaryParts,
        closed: list[Key],
        late_ends: Container[Key],
    ) -> None:
        """A batch's parts; ``closed`` are the invocations its late Ends end, ``late_ends``
        every late End stored (this batch's included)."""
        by_seq = self._by_seq
        for seq, start_ns in first_start.items():
            summary = by_seq.get(seq)
            if summary is None:
                by_seq[seq] = _Summary(start_ns, parts.counts[seq])
            else:
                summary.start_ns = min(summary.start_ns, start_ns)
                summary.invocations += parts.counts[seq]
        for key in closed:
            closed_seq = self._open_seq.pop(key, None)
            if closed_seq is not None:
                by_seq[closed_seq].open.discard(key)
        for row in parts.roots:
            summary = by_seq[row[0]]
            if summary.root is None or row[1:6] < summary.root[1:6]:
                summary.root = row
        for seq, puid, tid in parts.threads:
            by_seq[seq].threads.add((puid, tid))
        for entry in parts.entries:
            by_seq[entry[0]].entries.setdefault((entry[1], entry[2]), entry)
        open_seq = self._open_seq
        for puid, iid, seq in parts.opened:
            key = (puid, iid)
            if key not in late_ends and key not in open_seq:
                open_seq[key] = seq
                by_seq[seq].open.add(key)

    def forget(self, seq: bytes) -> None:
        summary = self._by_seq.pop(seq, None)
        if summary is not None:
            for key in summary.open:
                self._open_seq.pop(key, None)

    def summary(
        self,
        seq: bytes,
        *,
        late_ends: Mapping[Key, LateEnd],
        methods: Mapping[tuple[int, int], MethodRecord],
        handoffs: Container[int],
        lossy: bool,
        process: Callable[[int], ProcessRecord],
    ) -> SequenceSummary:
        """The listing line of a stored sequence (``process`` gives a process's record now)."""
        summary = self._by_seq[seq]
        root = summary.root
        assert root is not None  # every sequence here had a Start
        end_ns, error = root[7], root[8]
        if end_ns is None:
            late = late_ends.get((root[4], root[5]))
            end_ns, error = (None, None) if late is None else late
        remote_ends: list[int | None] = []
        if root[1] or root[2]:  # no true root: the entries nobody here handed off
            for _seq, puid, iid, hid, entry_end in summary.entries.values():
                if hid not in handoffs:
                    late = late_ends.get((puid, iid)) if entry_end is None else None
                    remote_ends.append(entry_end if late is None else late[0])
        open_by_process = Counter(puid for puid, _iid in summary.open)
        stored = StoredSummary(
            seq=seq,
            start_ns=summary.start_ns,
            invocations=summary.invocations,
            root=(*root[:7], end_ns, error),
            root_method=methods.get((root[4], root[6])),
            threads=len(summary.threads),
            processes=len({puid for puid, _tid in summary.threads}),
            open_by_process=dict(open_by_process),
            remote_ends=remote_ends,
            lossy=lossy,
        )
        return summary_from(stored, {puid: process(puid) for puid in open_by_process})

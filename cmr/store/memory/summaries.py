"""The memory backend's sequence summaries (``cmr.store.summaries``): each batch's parts kept in
dictionaries, by the rules the SQL stores write in their tables (``sqlite_summaries``): the
lowest-ranked root candidate wins, threads and entries are sets (first write wins), an
invocation is open until its late End arrives and never opened when the End came first."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field

from cmr.store.base import MethodRecord, ProcessRecord, SequenceQuery, SequenceSummary
from cmr.store.listing import ListingKeys
from cmr.store.memory.key_index import KeyIndex, RowKeys
from cmr.store.rules import qualified_name
from cmr.store.summaries import (
    EntryRow,
    RootRow,
    StoredSummary,
    SummaryParts,
    summary_from,
    waiting_on,
)

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
        self._by_start: list[tuple[int, bytes]] = []  # (start_ns, seq), in order
        self._index = KeyIndex()

    def in_window(self, since: int, until: int) -> tuple[list[tuple[int, bytes]], int, int]:
        """The start-ordered list of (start_ns, seq), and the range [low, high) of it that
        started in [since, until] (found by bisection; the caller must not change the list)."""
        by_start = self._by_start
        low = bisect.bisect_left(by_start, (since, b""))
        high = bisect.bisect_right(by_start, (until, b"\xff" * 17))
        return by_start, low, high

    def keys(self, seq: bytes) -> ListingKeys:
        """The sequence's listing keys, as the SQL stores keep them (``listing_sql``): set by
        its batches; whether calls are still open, as of now."""
        summary = self._by_seq[seq]
        keys = self._index.keys(seq)
        return ListingKeys(summary.start_ns, *keys, bool(summary.open))

    def candidates(
        self, query: SequenceQuery | None, names: list[str] | None, limit: int
    ) -> set[bytes] | None:
        """The sequences the indexes say a query may want (``KeyIndex.candidates``)."""
        return self._index.candidates(query, names, limit)

    def _index_keys(
        self,
        seq: bytes,
        late_ends: Mapping[Key, LateEnd],
        methods: Mapping[tuple[int, int], MethodRecord],
    ) -> None:
        summary = self._by_seq[seq]
        root, end_ns, error = _root_and_end(summary, late_ends)
        method = methods.get((root[4], root[6]))
        decided = not root[1] and not root[2] and method is not None
        name = qualified_name(method.module, method.qualname, 0) if decided and method else None
        self._index.put(seq, RowKeys(name, end_ns, error), summary.start_ns)

    def starts(self) -> dict[bytes, int]:
        """Each sequence's earliest start (the listing order); the caller must not change it."""
        return {seq: summary.start_ns for seq, summary in self._by_seq.items()}

    def starts_of(self, seqs: set[bytes]) -> dict[bytes, int]:
        """The earliest start of each of ``seqs``."""
        by_seq = self._by_seq
        return {seq: by_seq[seq].start_ns for seq in seqs}

    def processes_of(self, seq: bytes) -> set[int]:
        """The processes the sequence ran on."""
        return {puid for puid, _tid in self._by_seq[seq].threads}

    def add(
        self,
        first_start: Mapping[bytes, int],
        parts: SummaryParts,
        closed: list[Key],
        late_ends: Mapping[Key, LateEnd],
        methods: Mapping[tuple[int, int], MethodRecord],
    ) -> None:
        """A batch's parts; ``closed`` are the invocations its late Ends end, ``late_ends``
        every late End stored (this batch's included), ``methods`` every method described so
        far. The listing keys of the sequences it touches are indexed again."""
        by_seq = self._by_seq
        by_start = self._by_start
        for seq, start_ns in first_start.items():
            summary = by_seq.get(seq)
            if summary is None:
                by_seq[seq] = _Summary(start_ns, parts.counts[seq])
                bisect.insort(by_start, (start_ns, seq))
            else:
                if start_ns < summary.start_ns:
                    del by_start[bisect.bisect_left(by_start, (summary.start_ns, seq))]
                    bisect.insort(by_start, (start_ns, seq))
                    summary.start_ns = start_ns
                summary.invocations += parts.counts[seq]
        touched = set(first_start) | self._close(closed)
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
        for seq in touched:
            self._index_keys(seq, late_ends, methods)

    def _close(self, closed: list[Key]) -> set[bytes]:
        """Close invocations whose late End arrived; the sequences they were in."""
        seqs: set[bytes] = set()
        for key in closed:
            seq = self._open_seq.pop(key, None)
            if seq is not None:
                self._by_seq[seq].open.discard(key)
                seqs.add(seq)
        return seqs

    def undecided(self) -> set[bytes]:
        """The sequences whose root is not decided (``listing_sql``); the caller must not
        change the set."""
        return self._index.undecided()

    def longest_first(self) -> Iterator[set[bytes]]:
        """The decided, ended sequences a duration bucket at a time, longest bucket first."""
        return self._index.longest_first()

    def forget(self, seq: bytes) -> None:
        summary = self._by_seq.pop(seq, None)
        if summary is not None:
            self._index.remove(seq)
            del self._by_start[bisect.bisect_left(self._by_start, (summary.start_ns, seq))]
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
        root, end_ns, error = _root_and_end(summary, late_ends)
        remote_entries: list[tuple[int, int | None]] = []
        if root[1] or root[2]:  # no true root: the entries nobody here handed off
            for _seq, puid, iid, hid, entry_end in summary.entries.values():
                if hid not in handoffs:
                    late = late_ends.get((puid, iid)) if entry_end is None else None
                    remote_entries.append((puid, entry_end if late is None else late[0]))
        stored = StoredSummary(
            seq=seq,
            start_ns=summary.start_ns,
            invocations=summary.invocations,
            root=(*root[:7], end_ns, error),
            root_method=methods.get((root[4], root[6])),
            threads=len(summary.threads),
            processes=len({puid for puid, _tid in summary.threads}),
            remote_entries=remote_entries,
            lossy=lossy,
        )
        return summary_from(stored, {puid: process(puid) for puid in waiting_on(stored)})


def _root_and_end(
    summary: _Summary, late_ends: Mapping[Key, LateEnd]
) -> tuple[RootRow, int | None, str | None]:
    """The sequence's root candidate, with its end and exception (from its late End, if the
    End was not in the Start's batch)."""
    root = summary.root
    assert root is not None  # every sequence here had a Start
    if root[7] is not None:
        return root, root[7], root[8]
    end_ns, error = late_ends.get((root[4], root[5]), (None, None))
    return root, end_ns, error

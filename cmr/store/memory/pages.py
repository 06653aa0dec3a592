"""The memory store's pages of listing lines (``listing.Page``), read from its indexes
(``key_index``) and its start-ordered list of sequences, never copying either whole."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import Final

from cmr.store.base import SequenceQuery, SequenceSummary
from cmr.store.listing import LONGEST, UNDECIDED, PageKey, PageKind, candidate
from cmr.store.memory.summaries import MemorySummaries

#: Candidates at most this many, or a sixteenth of the window, are ordered whole; more, and the
#: window is walked newest first.
FEW_CANDIDATES: Final = 4096


class MemoryPages:
    """The pages of one query: ``line`` makes a sequence's listing line, ``on_host`` says
    whether it ran on the query's host."""

    def __init__(
        self,
        summaries: MemorySummaries,
        query: SequenceQuery | None,
        names: list[str] | None,
        window: tuple[int, int],
        *,
        on_host: Callable[[bytes], bool],
        line: Callable[[bytes], SequenceSummary],
    ) -> None:
        self._summaries = summaries
        self._query = query
        self._names = names
        self._since, self._until = window
        self._on_host = on_host
        self._line = line
        ordered, low, high = summaries.in_window(*window)
        indexed = summaries.candidates(query, names, max(FEW_CANDIDATES, (high - low) // 16))
        if indexed is not None:
            ordered = sorted(
                (start, seq)
                for seq, start in summaries.starts_of(indexed).items()
                if self._since <= start <= self._until
            )
            low, high = 0, len(ordered)
        self._newest = (ordered, low, high)
        self._undecided: list[tuple[int, bytes]] | None = None  # sorted on the first such page

    def __call__(self, kind: PageKind, key: PageKey, size: int) -> list[SequenceSummary]:
        if kind == LONGEST:
            return self._longest(key, size)
        ordered, low, high = self._newest
        if kind == UNDECIDED:  # those only, in start order
            if self._undecided is None:
                starts = self._summaries.starts_of(self._summaries.undecided())
                self._undecided = sorted((start, seq) for seq, start in starts.items())
            ordered, low, high = self._undecided, 0, len(self._undecided)
        lines: list[SequenceSummary] = []
        at = bisect.bisect_left(ordered, key, low, high)
        while at > low and len(lines) < size:
            at -= 1
            start, seq = ordered[at]
            if self._since <= start <= self._until and self._passes(kind, seq):
                lines.append(self._line(seq))
        return lines

    def _passes(self, kind: PageKind, seq: bytes) -> bool:
        keys = self._summaries.keys(seq)
        return candidate(kind, self._query, self._names, keys) and self._on_host(seq)

    def _longest(self, key: PageKey, size: int) -> list[SequenceSummary]:
        """Duration buckets longest first, until they hold a page: no later bucket beats it."""
        found: list[tuple[int, int, bytes]] = []
        for bucket in self._summaries.longest_first():
            for seq in bucket:
                keys = self._summaries.keys(seq)
                entry = ((keys.end_ns or 0) - keys.start_ns, keys.start_ns, seq)
                if (
                    entry < key
                    and self._since <= keys.start_ns <= self._until
                    and candidate(LONGEST, self._query, self._names, keys)
                    and self._on_host(seq)
                ):
                    found.append(entry)
            if len(found) >= size:
                break
        return [self._line(seq) for _d, _s, seq in heapq.nlargest(size, found)]

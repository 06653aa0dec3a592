"""The memory store's lossy marks: the processes that reported dropping events of a sequence
(``Batch.lost_seqs``), and each process's windows of drops whose sequences it could not name
(``Batch.lost_windows``): a sequence of the process that meets one is lossy too
(``rules.overlaps_window``, as the SQL stores ask)."""

from __future__ import annotations

from collections.abc import Iterable

from cmr.store.memory.summaries import MemorySummaries
from cmr.store.rules import LostRow, LostWindowRow, overlaps_window


class LossyMarks:
    def __init__(self) -> None:
        self._lost_by: dict[bytes, set[int]] = {}  # seq -> processes that dropped its events
        #: puid -> its windows of unnamed drops (wall clock; ``rules.lost_window_rows``)
        self._windows: dict[int, set[tuple[int, int]]] = {}

    def add(self, lost: Iterable[LostRow], windows: Iterable[LostWindowRow]) -> None:
        for seq, puid in lost:
            self._lost_by.setdefault(seq, set()).add(puid)
        for puid, first, last in windows:
            self._windows.setdefault(puid, set()).add((first, last))

    def named_by(self, seq: bytes) -> frozenset[int]:
        """The processes that named the sequence lossy."""
        return frozenset(self._lost_by.get(seq, ()))

    def windows_of(self, seq: bytes, summaries: MemorySummaries) -> dict[int, tuple[int, int]]:
        """The processes whose windows of unnamed drops the sequence meets, with the first and
        last times of those windows."""
        if not self._windows:
            return {}
        keys = summaries.keys(seq)
        found: dict[int, tuple[int, int]] = {}
        for puid in summaries.processes_of(seq) & self._windows.keys():
            windows = self._windows[puid]
            met = [w for w in windows if overlaps_window(w, keys.start_ns, keys.end_ns)]
            if met:
                found[puid] = (min(w[0] for w in met), max(w[1] for w in met))
        return found

    def lossy(self, seq: bytes, summaries: MemorySummaries) -> bool:
        return bool(self._lost_by.get(seq) or self.windows_of(seq, summaries))

    def forget_sequence(self, seq: bytes) -> None:
        self._lost_by.pop(seq, None)

    def forget_process(self, puid: int) -> None:
        self._windows.pop(puid, None)

    def names(self, puid: int) -> bool:
        """Whether the process named a sequence still stored (it is not gone while it does)."""
        return any(puid in puids for puids in self._lost_by.values())

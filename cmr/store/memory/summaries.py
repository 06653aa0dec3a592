"""The memory backend's sequence summaries (``cmr.store.summaries``), kept as Starts and Ends are
stored: exact, since the memory store keeps the first write of each event key and tells this
module only of those."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from itertools import compress

from cmr.store._shared import EndRow, StartRow, root_rank
from cmr.store.base import MethodRecord, ProcessRecord, SequenceSummary
from cmr.store.summaries import StoredSummary, summary_from

Key = tuple[int, int]  # (puid, iid)


@dataclass(slots=True)
class _Summary:
    invocations: int = 0
    threads: set[Key] = field(default_factory=set)  # (puid, tid)
    root: StartRow | None = None
    entries: list[StartRow] = field(default_factory=list)  # parentless, continuing a hand-off
    open: dict[int, set[int]] = field(default_factory=dict)  # puid -> iids without an End


_PUID = operator.itemgetter(0)
_IID = operator.itemgetter(1)


def _untrue(root: StartRow | None) -> bool:
    """No candidate yet, or one with a parent (a parentless one ranks before any such)."""
    return root is None or bool(root[3])


def _rank(row: StartRow) -> tuple[int, ...]:
    puid, iid, _seq, parent, hid, _tid, _method, start_ns = row
    return root_rank(parent, hid, start_ns, puid, iid)


class MemorySummaries:
    """Per sequence: what its listing line needs, updated per stored Start and End."""

    def __init__(self) -> None:
        self._by_seq: dict[bytes, _Summary] = {}
        self._open_seq: dict[Key, bytes] = {}  # an open invocation's sequence

    def add(self, starts: list[StartRow], ended: list[Key], ends: dict[Key, EndRow]) -> None:
        """A batch's Starts and Ends stored for the first time (``ends``: every End stored, this
        batch's included). Bulk operations; a look at each Start only where it may matter."""
        by_seq = self._by_seq
        for seq, count in Counter([row[2] for row in starts]).items():
            summary = by_seq.get(seq)
            if summary is None:
                summary = by_seq[seq] = _Summary()
            summary.invocations += count
        for puid, tid, seq in {(row[0], row[5], row[2]) for row in starts}:
            by_seq[seq].threads.add((puid, tid))
        for row in [row for row in starts if not row[3]]:  # parentless: roots and entries
            summary = by_seq[row[2]]
            if summary.root is None or _rank(row) < _rank(summary.root):
                summary.root = row
            if row[4]:
                summary.entries.append(row)
        # A sequence with no parentless call so far: its best candidate among this batch's.
        rootless = {seq for seq in {row[2] for row in starts} if _untrue(by_seq[seq].root)}
        for seq in rootless:
            best = min((row for row in starts if row[2] == seq), key=_rank)
            summary = by_seq[seq]
            if summary.root is None or _rank(best) < _rank(summary.root):
                summary.root = best
        keys = zip(map(_PUID, starts), map(_IID, starts), strict=True)
        for row in compress(starts, map(operator.not_, map(ends.__contains__, keys))):
            puid, iid, seq = row[0], row[1], row[2]
            by_seq[seq].open.setdefault(puid, set()).add(iid)
            self._open_seq[puid, iid] = seq
        for key in ended:
            open_seq = self._open_seq.pop(key, None)
            if open_seq is not None:
                by_seq[open_seq].open[key[0]].discard(key[1])

    def forget(self, seq: bytes) -> None:
        summary = self._by_seq.pop(seq, None)
        if summary is not None:
            for puid, iids in summary.open.items():
                for iid in iids:
                    self._open_seq.pop((puid, iid), None)

    def summary(
        self,
        seq: bytes,
        start_ns: int,
        *,
        ends: dict[Key, EndRow],
        methods: dict[Key, MethodRecord],
        handoffs: Container[int],
        lossy: bool,
        process: Callable[[int], ProcessRecord],
    ) -> SequenceSummary:
        """The listing line: a look at each of the sequence's entries, nothing per invocation."""
        summary = self._by_seq[seq]
        root = summary.root
        assert root is not None  # a sequence is known by its first Start
        puid, iid, _seq, parent, hid, _tid, method, root_start = root
        end = ends.get((puid, iid))
        remote = (
            [ends.get((e[0], e[1])) for e in summary.entries if e[4] not in handoffs]
            if parent or hid
            else []
        )
        open_by_process = {p: len(iids) for p, iids in summary.open.items() if iids}
        stored = StoredSummary(
            seq=seq,
            start_ns=start_ns,
            invocations=summary.invocations,
            root=(
                seq,
                int(parent != 0),
                int(hid != 0),
                root_start,
                puid,
                iid,
                method,
                None if end is None else end[2],
            ),
            root_method=methods.get((puid, method)),
            threads=len(summary.threads),
            processes=len({p for p, _tid in summary.threads}),
            open_by_process=open_by_process,
            remote_ends=[None if e is None else e[2] for e in remote],
            lossy=lossy,
        )
        return summary_from(stored, {p: process(p) for p in open_by_process})

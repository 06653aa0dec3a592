"""Sequence summaries kept at ingest, so that listing never reads a sequence's events.

A listing line (``SequenceSummary``) needs, per sequence: how many invocations, on how many
threads and processes, which invocation is the root (``rules.root_rank``) and when it ended,
and the parentless invocations that continue a hand-off nobody here recorded (a foreign system's
request), with their processes. The status follows the root (``rules.sequence_status``):
running or incomplete depends on its process's state when read (``waiting_on``); the
invocations still open are kept for the listing by status (``listing_sql``). Each batch adds to
these (``SummaryParts``, built in ``batch_index.pack``'s pass over the events); a store keeps them
in small tables next to the batches:

- per sequence: its Start count and its best root candidate so far (the lowest rank wins);
- per (sequence, puid, tid): that the sequence ran there;
- per entry (parentless, continuing a hand-off): its hid and, when its End came in its batch, its
  end; the store looks up a later End among the late Ends;
- per open invocation (its End was not in its batch): (puid, iid, seq), removed when the End
  arrives (an End that came first is never opened).

Reading a summary is then a few index lookups whatever the size of the sequence
(``summary_from``). Counts are of Starts as received: a forged batch that repeats another
batch's Starts under a new batch number counts them twice in a listing (never in a tree, where
the first write of an event key wins).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress

from cmr.store.base import MethodRecord, ProcessRecord, SequenceSummary
from cmr.store.rules import (
    RemoteEntries,
    RootCandidate,
    qualified_name,
    root_rank,
    sequence_status,
    summary_root,
)

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # a listing reads summaries without the protocol (msgspec)
    from typing import TypeAlias

    from cmr.store.base import InvocationRecord
    from invoseq.wire import End, Error, Start, ThreadChunk

#: Decoded stored batches by (puid, batch_no), kept while one pass reads many sequences
#: (``stored_batches.unpack``'s cache; defined here because packed imports this module).
BatchCache: TypeAlias = "dict[tuple[int, int], list[ThreadChunk]]"

_IID = operator.attrgetter("iid")
_PARENT = operator.attrgetter("parent")

#: (seq, not a true root: parent != 0, continues a hand-off: hid != 0, start_ns, puid, iid,
#: method, end_ns or None, the exception type it raised or None): the first six order
#: candidates as ``root_rank`` does.
RootRow = tuple[bytes, int, int, int, int, int, int, int | None, str | None]
#: (seq, puid, iid, hid, end_ns or None): a parentless invocation continuing hand-off ``hid``.
EntryRow = tuple[bytes, int, int, int, int | None]
#: (puid, iid, seq): an invocation whose End was not in its batch.
OpenRow = tuple[int, int, bytes]


@dataclass(slots=True)
class SummaryParts:
    """What one batch adds to the summaries of its sequences (times are wall clock)."""

    counts: Counter[bytes] = field(default_factory=Counter)  # seq -> Starts in the batch
    threads: set[tuple[bytes, int, int]] = field(default_factory=set)  # (seq, puid, tid)
    roots: list[RootRow] = field(default_factory=list)  # the best candidate of each sequence
    entries: list[EntryRow] = field(default_factory=list)
    opened: list[OpenRow] = field(default_factory=list)


class SummaryCollector:
    """Gathers ``SummaryParts`` chunk by chunk during ``pack``'s pass: per chunk a set of its
    sequences and the Starts without a parent (few); per batch one pass over its Starts to find
    those left open."""

    __slots__ = ("_earliest", "_offset", "_parentless", "_puid", "_starts", "parts")

    def __init__(self, puid: int, offset: int) -> None:
        self._puid = puid
        self._offset = offset
        self._starts: list[Start] = []
        self._parentless: list[Start] = []
        self._earliest: dict[bytes, Start] = {}
        self.parts = SummaryParts()

    def add_chunk(self, tid: int, starts: list[Start], earliest: dict[bytes, Start]) -> None:
        """A chunk's Starts, and the earliest of each of its sequences (``earliest``)."""
        parts = self.parts
        self._starts += starts
        parts.threads.update([(seq, self._puid, tid) for seq in earliest])
        self._parentless += compress(starts, map(operator.not_, map(_PARENT, starts)))
        known = self._earliest
        for seq, event in earliest.items():
            other = known.get(seq)
            if other is None or (event.t_ns, event.iid) < (other.t_ns, other.iid):
                known[seq] = event

    def finish(
        self, ends: list[End], errors: list[Error], start_seqs: dict[int, bytes]
    ) -> SummaryParts:
        """The parts, once every chunk is added; ``ends`` and ``errors`` are the batch's, and
        ``start_seqs`` the sequence of each of its Starts by iid. The passes over every event
        run at C speed (``map``, ``compress``, ``Counter``, set operations); Python looks only
        at the few they pick out."""
        parts, puid, offset = self.parts, self._puid, self._offset
        parts.counts = Counter(start_seqs.values())
        ended = set(map(_IID, ends))
        ended.update(map(_IID, errors))
        parts.opened = [(puid, iid, start_seqs[iid]) for iid in start_seqs.keys() - ended]
        best: dict[bytes, Start] = {}
        for event in self._parentless:  # true roots first, then entries, each by time
            known = best.get(event.seq)
            if known is None or _rank(event) < _rank(known):
                best[event.seq] = event
        for seq, event in self._earliest.items():
            if seq not in best:
                best[seq] = event if not event.hid else self._best_with_parent(seq)
        chosen = {e.iid for e in best.values()}
        chosen.update(e.iid for e in self._parentless if e.hid)
        found: list[End | Error] = [*compress(ends, map(chosen.__contains__, map(_IID, ends)))]
        found += [e for e in errors if e.iid in chosen]
        end_of = {e.iid: e.t_ns + offset for e in found}
        from invoseq.wire import Error  # loaded by now: the batches were decoded with it

        error_of = {e.iid: e.error for e in found if type(e) is Error}
        parts.roots = [
            (
                seq,
                int(e.parent != 0),
                int(e.hid != 0),
                e.t_ns + offset,
                puid,
                e.iid,
                e.method,
                end_of.get(e.iid),
                error_of.get(e.iid),
            )
            for seq, e in best.items()
        ]
        parts.entries = [
            (e.seq, puid, e.iid, e.hid, end_of.get(e.iid)) for e in self._parentless if e.hid
        ]
        return parts

    def _best_with_parent(self, seq: bytes) -> Start:
        """The sequence's best candidate when all its Starts here have a parent and the earliest
        continues a hand-off: one without a hand-off ranks first (rare: a scan)."""
        return min((e for e in self._starts if e.seq == seq), key=_rank)


def _rank(event: Start) -> tuple[bool, bool, int, int]:
    """``root_rank`` within one batch (one process: puid is the same)."""
    return (event.parent != 0, event.hid != 0, event.t_ns, event.iid)


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """A sequence's summary as a store keeps it, read by index (``summary_from`` turns it into
    a listing line)."""

    seq: bytes
    start_ns: int
    invocations: int
    root: RootRow
    root_method: MethodRecord | None
    threads: int
    processes: int
    # The parentless entries whose hand-off nobody here recorded, as (puid, end_ns or None):
    # read only when the root candidate is not a true root.
    remote_entries: list[tuple[int, int | None]]
    lossy: bool


def waiting_on(stored: StoredSummary) -> list[int]:
    """The processes of the root's invocations still open, one puid each: the true root, the
    open entries of a remote parent, or the candidate named when the root was lost. The
    sequence's status waits on them alone (``rules.sequence_status``)."""
    _seq, untrue, handed, _start, puid, _iid, _method, end_ns, _error = stored.root
    if (untrue or handed) and stored.remote_entries:
        return [entry_puid for entry_puid, end in stored.remote_entries if end is None]
    return [puid] if end_ns is None else []


def summary_from(stored: StoredSummary, processes: dict[int, ProcessRecord]) -> SequenceSummary:
    """The listing line, by the rules ``rules.summarize`` applies to a loaded sequence
    (``processes`` holds at least those ``waiting_on`` names)."""
    _seq, untrue, handed, _start, _puid, _iid, method_id, end_ns, error = stored.root
    method = stored.root_method
    best = RootCandidate(
        parent=untrue,
        hid=handed,
        name=qualified_name(
            method.module if method else None, method.qualname if method else None, method_id
        ),
        end_ns=end_ns,
        error=error,
    )
    ends = [end for _puid, end in stored.remote_entries if end is not None]
    count = len(stored.remote_entries)
    remote = RemoteEntries(count, count - len(ends), max(ends, default=None))
    root, root_end_ns, root_error = summary_root(best, remote)
    alive = [not _finished(processes.get(puid)) for puid in waiting_on(stored)]
    return SequenceSummary(
        seq=stored.seq,
        root=root,
        start_ns=stored.start_ns,
        end_ns=root_end_ns,
        invocations=stored.invocations,
        threads=stored.threads,
        processes=stored.processes,
        status=sequence_status(root_end_ns, alive),
        lossy=stored.lossy,
        error=root_error,
    )


def _finished(process: ProcessRecord | None) -> bool:
    """A process known to have ended or been lost (one never heard of may still speak)."""
    return process is not None and process.finished


def parts_of(seq: bytes, records: Sequence[InvocationRecord]) -> SummaryParts:
    """A whole sequence's parts from its records (upgrading a repository stored without them)."""
    best = min(records, key=lambda r: root_rank(r.parent, r.hid, r.start_ns, r.puid, r.iid))
    root: RootRow = (
        seq,
        int(best.parent != 0),
        int(best.hid != 0),
        best.start_ns,
        best.puid,
        best.iid,
        best.method,
        best.end_ns,
        best.error,
    )
    return SummaryParts(
        counts=Counter({seq: len(records)}),
        threads={(seq, r.puid, r.tid) for r in records},
        roots=[root],
        entries=[(seq, r.puid, r.iid, r.hid, r.end_ns) for r in records if not r.parent and r.hid],
        opened=[(r.puid, r.iid, seq) for r in records if r.end_ns is None],
    )


def backfilled(
    seqs: Iterable[bytes], records_of: Callable[[bytes, BatchCache], Sequence[InvocationRecord]]
) -> Iterator[tuple[bytes, int, SummaryParts]]:
    """(seq, invocations, parts) of each sequence of a repository stored without summaries,
    from its records (``records_of``, given a cache of decoded batches: sequences stored
    together share batches; the cache is bounded)."""
    cache: BatchCache = {}
    for seq in seqs:
        records = records_of(seq, cache)
        if records:
            yield seq, len(records), parts_of(seq, records)
        if len(cache) > 256:
            cache.clear()

"""What a call tree is made of, read from the store's records before any node exists: where each
invocation sits, which one encloses it, which is the root, how it was handed off, and its name,
thread, process and status. ``calltree`` makes a node of every record from these;
``bigtree`` only of the records a line budget shows.

The rules: the submitter of a known hand-off wins over the Start's own parent (which names only
the same process); a link to a missing node, or to the node itself, is no link. An invocation
that continues a hand-off no process here recorded, and has no parent, came from a foreign
system: its hop is remote, with unknown submit and queue times (when there is no true root:
beside one, it is an orphan of lost events). The true root is the earliest invocation with
neither a parent nor a hand-off.

A million records are the case to be fast for, so each step is a comprehension over the
records with a plain lookup per record, and loops run only over the few with a hand-off.
"""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from dataclasses import dataclass

from cmr.store.base import HandoffRecord, InvocationRecord, ProcessRecord, SequenceData
from cmr.store.columns import process_pairs
from cmr.views.model import (
    HANDOFF_REMOTE,
    KIND_MEASURED,
    STATUS_ERROR,
    STATUS_INCOMPLETE,
    STATUS_OK,
    STATUS_RUNNING,
    UNKNOWN_HOST,
    UNKNOWN_THREAD,
    Handoff,
    Node,
    ProcessRef,
    Status,
    ThreadRef,
    method_name,
)

_PUID = operator.attrgetter("puid")
_IID = operator.attrgetter("iid")
_PARENT = operator.attrgetter("parent")
_START = operator.attrgetter("start_ns")


def index_records(records: Sequence[InvocationRecord]) -> dict[int, dict[int, int]]:
    """Where each iid of each process sits in ``records`` (the last of repeated ones): puid ->
    iid -> position. Keyed by process, then iid: no tuple per record."""
    puids = set(map(_PUID, records))
    if len(puids) == 1:  # the usual case: built at C speed, no Python loop
        return {puids.pop(): dict(zip(map(_IID, records), range(len(records)), strict=True))}
    index: dict[int, dict[int, int]] = {puid: {} for puid in puids}
    for i, r in enumerate(records):
        index[r.puid][r.iid] = i
    return index


def start_ordered(records: Sequence[InvocationRecord]) -> bool:
    """Whether the records are in (start, iid, puid) order already (strictly by start)."""
    starts = list(map(_START, records))
    return all(map(operator.lt, starts, itertools.islice(starts, 1, None)))


@dataclass(frozen=True, slots=True)
class Links:
    parents: MutableSequence[int]  # each record's parent's position; -1: none, or not here
    root_index: int | None  # the true root's position; None: there is none
    remote: list[int]  # continuing a hand-off nobody here recorded, without a parent
    hops: dict[int, Handoff]  # position -> how it was reached, for those handed off


def link(
    records: Sequence[InvocationRecord],
    index: dict[int, dict[int, int]],
    handoffs: dict[int, HandoffRecord],
) -> Links:
    """Each record's parent, the root, the foreign entries and the hops (module docstring)."""
    if len(index) == 1:  # iid 0 is no invocation: a parent of 0 finds none
        [positions] = index.values()
        parents = list(map(positions.get, map(_PARENT, records), itertools.repeat(-1)))
    else:
        parents = [index[r.puid].get(r.parent, -1) if r.parent else -1 for r in records]
    for i in [i for i, parent in enumerate(parents) if parent == i]:
        parents[i] = -1
    return linked(
        records,
        parents,
        locate=lambda puid, iid: index.get(puid, {}).get(iid, -1),
        handed=[i for i, r in enumerate(records) if r.hid],
        roots=[i for i, r in enumerate(records) if not r.parent and not r.hid],
        handoffs=handoffs,
    )


def linked(
    records: Sequence[InvocationRecord],
    parents: MutableSequence[int],
    *,
    locate: Callable[[int, int], int],
    handed: list[int],
    roots: list[int],
    handoffs: dict[int, HandoffRecord],
) -> Links:
    """``link``'s rules for the few records with a hand-off (``handed``) and the root among
    ``roots`` (no parent, no hand-off), given each record's parent in its own process
    (``parents``, completed here) and the position of a (puid, iid) (``locate``, -1: none)."""
    remote: list[int] = []
    hops: dict[int, Handoff] = {}
    for i in handed:
        r = records[i]
        handoff = handoffs.get(r.hid)
        if handoff is None:
            if not r.parent:
                remote.append(i)
            continue
        submitted = handoff.submitted_ns
        hops[i] = Handoff(r.hid, handoff.kind, submitted, queued_ns(r, handoff))
        if handoff.parent:
            submitter = locate(handoff.puid, handoff.parent)
            if submitter >= 0 and submitter != i:
                parents[i] = submitter
    root_index = (
        min(roots, key=lambda i: (records[i].start_ns, records[i].iid, records[i].puid))
        if roots
        else None
    )
    if root_index is None:  # beside a true root, they are orphans of lost events
        for i in remote:
            hops[i] = Handoff(records[i].hid, HANDOFF_REMOTE, None, None)
    return Links(parents, root_index, remote, hops)


def held_under(parents: list[int], root: int) -> list[int]:
    """Each record's caller as the tree hangs it: its parent's position, an orphan (no parent
    here) under the root, the root under none (-1)."""
    held = [root if parent < 0 else parent for parent in parents]
    held[root] = -1
    return held


def children_lists(held: list[int]) -> list[list[int]]:
    """Per position, the positions it holds (``held_under``), in record order: built without a
    Python loop (``children[held[i]].append(i)`` for every i, the root's -1 on a spare list)."""
    count = len(held)
    children: list[list[int]] = [[] for _ in range(count + 1)]
    collections.deque(map(list.append, map(children.__getitem__, held), range(count)), maxlen=0)
    del children[-1]
    return children


def process_ref(puid: int, info: ProcessRecord | None) -> ProcessRef:
    if info is None:
        return ProcessRef(puid, 0, UNKNOWN_HOST)
    return ProcessRef(puid, info.pid, info.host, info.state, info.last_seen_ns)


def dropped_by(data: SequenceData) -> tuple[ProcessRef, ...]:
    """The processes that reported dropping events of the sequence, by host, pid and puid."""
    return tuple(
        sorted(
            (process_ref(puid, data.processes.get(puid)) for puid in data.lost_by),
            key=lambda p: (p.host, p.pid, p.puid),
        )
    )


def dropped_in_window(data: SequenceData) -> tuple[tuple[int, int, int], ...]:
    """(puid, first_ns, last_ns) of the windows of unnamed drops the sequence overlaps."""
    return tuple(sorted((puid, *window) for puid, window in data.lost_windows.items()))


def queued_ns(record: InvocationRecord, handoff: HandoffRecord) -> int:
    """How long the work waited between its hand-off and the call that continues it (0 when
    the two processes' clocks disagree): the queue wait ``cmr show`` prints on a hop."""
    return max(0, record.start_ns - handoff.submitted_ns)


def duration(record: InvocationRecord) -> int | None:
    end = record.end_ns
    return None if end is None else end - record.start_ns if end > record.start_ns else 0


class Naming:
    """Per process: its reference, the status of its open calls, its methods' and threads' names
    (what a node of each record is labelled with)."""

    __slots__ = ("names", "open_status", "refs", "thread_count", "threads")

    def __init__(
        self, records: Sequence[InvocationRecord], puids: Iterable[int], data: SequenceData
    ) -> None:
        index = list(puids)
        self.refs = {puid: process_ref(puid, data.processes.get(puid)) for puid in index}
        # An open invocation is incomplete once its process ended or is lost.
        self.open_status: dict[int, Status] = {
            puid: STATUS_INCOMPLETE
            if (info := data.processes.get(puid)) and info.finished
            else STATUS_RUNNING
            for puid in index
        }
        self.names: dict[int, dict[int, str]] = {puid: {} for puid in index}
        methods, threads = process_pairs(records, "method", "tid")
        for puid, method in methods:
            self.names[puid][method] = method_name(data.methods, puid, method)
        self.threads: dict[int, dict[int, ThreadRef]] = {puid: {} for puid in index}
        for puid, tid in threads:
            known = data.threads.get((puid, tid))
            name = known.name if known is not None else UNKNOWN_THREAD
            self.threads[puid][tid] = ThreadRef(tid, name)
        self.thread_count = sum(len(by_tid) for by_tid in self.threads.values()) + sum(
            tid not in self.threads.get(puid, {}) for puid, tid in data.folded_threads
        )  # the threads of calls a view folded count too, as in the listing

    def nodes(self, records: Sequence[InvocationRecord]) -> list[Node]:
        """A node per record, without children or hop; self time as if it had no children."""
        names, refs, threads, open_status = self.names, self.refs, self.threads, self.open_status
        return [
            Node(
                names[r.puid][r.method],
                r.start_ns,
                r.end_ns,
                spent := (
                    None
                    if r.end_ns is None
                    else r.end_ns - r.start_ns
                    if r.end_ns > r.start_ns
                    else 0
                ),
                spent,  # a leaf's self time; a caller's is set once its children are known
                refs[r.puid],
                threads[r.puid][r.tid],
                STATUS_ERROR
                if r.error is not None
                else STATUS_OK
                if r.end_ns is not None
                else open_status[r.puid],
                r.error,
                r.iid,
                KIND_MEASURED,
                None,
                attributes=r.attributes,
            )
            for r in records
        ]

"""Rebuild one sequence's call tree from the flat records a store returns.

The store hands back invocations as rows: ``(puid, iid)`` names a node and ``(puid, parent)`` its
enclosing call; an invocation that continues a hand-off (``hid``) hangs under the invocation that
submitted the work, whichever thread, task or process ran it. Real data is messy — events get
lost, a process dies, a sender may repeat itself — so the builder never trusts the links:
duplicates keep their first record, a node whose parent is missing (or which points at itself, or
sits on a cycle) is attached under the root rather than dropped, and a sequence without a root
gets a synthetic one. Everything is iterative so a 10,000-deep chain or a 100,000-node tree
builds without touching the recursion limit.

The root, in order of precedence: the earliest invocation with neither a parent nor a hand-off
(the true root); else, when some invocation continues a hand-off that no process here recorded
and has no parent (a foreign system called in), a synthetic ``<remote parent>`` whose children
are those invocations; else a synthetic ``<unknown root>`` (events were lost). Either synthetic
root also collects the orphans.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable

from cmr.store._shared import process_pairs
from cmr.store.base import (
    REMOTE_PARENT,
    InvocationRecord,
    ProcessRecord,
    SequenceData,
)
from cmr.views._gc import paused_gc
from cmr.views.model import (
    HANDOFF_REMOTE,
    KIND_MEASURED,
    KIND_SYNTHETIC,
    STATUS_ERROR,
    STATUS_INCOMPLETE,
    STATUS_OK,
    STATUS_RUNNING,
    TREE_COMPLETE,
    UNKNOWN_HOST,
    UNKNOWN_ROOT,
    UNKNOWN_THREAD,
    Handoff,
    Node,
    ProcessRef,
    SequenceTree,
    Status,
    ThreadRef,
    TreeStatus,
    method_name,
    walk,
)


def build_tree(data: SequenceData) -> SequenceTree:
    """The call tree of ``data``, in time near-linear in its size: one pass over the records
    makes the nodes and finds each one's parent, children are appended in start order (the
    records usually come that way; otherwise one sort of them all), and self times need no walk."""
    with paused_gc():
        return _build(data)


def _build(data: SequenceData) -> SequenceTree:
    records = data.invocations
    index = _index(records)
    if sum(len(iids) for iids in index.values()) < len(records):
        records = _unique(records)
        index = _index(records)
    nodes, parents, root_index, remote, threads, processes = _make_nodes(records, index, data)

    if root_index is not None:
        root = nodes[root_index]
    elif remote:
        root = _synthetic_root(REMOTE_PARENT)
    else:
        root = _synthetic_root(UNKNOWN_ROOT)
    for i in _start_order_of(records):
        parent = parents[i]
        if parent >= 0:
            nodes[parent].children.append(nodes[i])
        elif i != root_index:
            root.children.append(nodes[i])  # an orphan: keep it, under the root

    # A parent that starts before its child (as every real one does) sits before it in start
    # order: no cycle can then hide anything. Otherwise count what the root reaches.
    acyclic = all(map(operator.lt, parents, range(len(parents)))) and _start_ordered(records)
    if not acyclic and _count(root) < len(nodes) + (root.kind == KIND_SYNTHETIC):
        _break_cycles(root, nodes, parents)
    for node in [node for node in nodes if node.children and node.duration_ns is not None]:
        node.self_ns = max(0, (node.duration_ns or 0) - _covered(node, node.children))
    statuses = {node.status for node in nodes}
    if root.kind == KIND_SYNTHETIC:
        _span_children(root, statuses)
    return SequenceTree(
        seq=data.seq,
        status=_tree_status(statuses | {root.status}),
        root=root,
        invocations=len(records),
        threads=threads,
        processes=processes,
        dropped_by=tuple(
            sorted(
                (_process_ref(puid, data.processes.get(puid)) for puid in data.lost_by),
                key=lambda p: (p.host, p.pid, p.puid),
            )
        ),
    )


def _index(records: list[InvocationRecord]) -> dict[int, dict[int, int]]:
    """Where each iid of each process sits in ``records`` (the last of repeated ones): puid ->
    iid -> position. Keyed by process, then iid: no tuple per record."""
    puids = {r.puid for r in records}
    if len(puids) == 1:
        return {puids.pop(): {r.iid: i for i, r in enumerate(records)}}
    index: dict[int, dict[int, int]] = {puid: {} for puid in puids}
    for i, r in enumerate(records):
        index[r.puid][r.iid] = i
    return index


def _unique(invocations: list[InvocationRecord]) -> list[InvocationRecord]:
    """The first record of every (puid, iid): a repeated record must not appear twice."""
    seen: dict[tuple[int, int], InvocationRecord] = {}
    for record in invocations:
        seen.setdefault((record.puid, record.iid), record)
    return list(seen.values())


def _make_nodes(
    records: list[InvocationRecord], index: dict[int, dict[int, int]], data: SequenceData
) -> tuple[list[Node], list[int], int | None, bool, int, int]:
    """The nodes, in record order; each one's parent's position (-1: none, or not here); the
    true root's position (None: there is none); whether, without one, some invocation came from a
    foreign system; how many threads and processes the calls ran on.

    The submitter of a known hand-off wins over the Start's own parent (which names only the
    same process); a link to a missing node, or to the node itself, is no link. An invocation
    that continues a hand-off no process here recorded, and has no parent, came from a foreign
    system: its hop is remote, with unknown submit and queue times (when there is no true root:
    beside one, it is an orphan of lost events). The true root is the earliest
    invocation with neither a parent nor a hand-off.

    A million calls make a million nodes, so the work is a few comprehensions over the records,
    each a plain lookup per record, and loops only over the few with a hand-off or no parent."""
    refs = {puid: _process_ref(puid, data.processes.get(puid)) for puid in index}
    # An open invocation is incomplete once its process ended or is lost.
    open_status: dict[int, Status] = {
        puid: STATUS_INCOMPLETE
        if (info := data.processes.get(puid)) and info.finished
        else STATUS_RUNNING
        for puid in index
    }
    names: dict[int, dict[int, str]] = {puid: {} for puid in index}
    for puid, method in process_pairs(records, "method"):
        names[puid][method] = method_name(data.methods, puid, method)
    threads: dict[int, dict[int, ThreadRef]] = {puid: {} for puid in index}
    for puid, tid in process_pairs(records, "tid"):
        known = data.threads.get((puid, tid))
        threads[puid][tid] = ThreadRef(tid, known.name if known is not None else UNKNOWN_THREAD)
    nodes = [
        Node(
            names[r.puid][r.method],
            r.start_ns,
            r.end_ns,
            duration := (
                None if r.end_ns is None else r.end_ns - r.start_ns if r.end_ns > r.start_ns else 0
            ),
            duration,  # a leaf's self time; a caller's is set once its children are known
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
    parents = [index[r.puid].get(r.parent, -1) if r.parent else -1 for r in records]
    for i in [i for i, parent in enumerate(parents) if parent == i]:
        parents[i] = -1
    handoffs = data.handoffs
    remote: list[int] = []  # invocations continuing a hand-off nobody here recorded, no parent
    for i in [i for i, r in enumerate(records) if r.hid]:
        r = records[i]
        handoff = handoffs.get(r.hid)
        if handoff is None:
            if not r.parent:
                remote.append(i)
            continue
        submitted = handoff.submitted_ns
        nodes[i].handoff = Handoff(r.hid, handoff.kind, submitted, max(0, r.start_ns - submitted))
        if handoff.parent:
            submitter = index.get(handoff.puid, {}).get(handoff.parent, -1)
            if submitter >= 0 and submitter != i:
                parents[i] = submitter
    roots = [i for i, r in enumerate(records) if not r.parent and not r.hid]
    root_index = (
        min(roots, key=lambda i: (records[i].start_ns, records[i].iid, records[i].puid))
        if roots
        else None
    )
    if root_index is None:  # beside a true root, they are orphans of lost events
        for i in remote:
            nodes[i].handoff = Handoff(records[i].hid, HANDOFF_REMOTE, None, None)
    thread_count = sum(len(by_tid) for by_tid in threads.values())
    return nodes, parents, root_index, bool(remote), thread_count, len(index)


def _start_ordered(records: list[InvocationRecord]) -> bool:
    """Whether the records are in (start, iid, puid) order already (strictly by start)."""
    starts = [r.start_ns for r in records]
    return all(map(operator.lt, starts, itertools.islice(starts, 1, None)))


def _start_order_of(records: list[InvocationRecord]) -> Iterable[int]:
    """Record positions by (start, iid, puid): children appended in this order are sorted. Stores
    usually return records by start already, which costs one pass to confirm."""
    if _start_ordered(records):
        return range(len(records))
    keys = [(r.start_ns, r.iid, r.puid) for r in records]
    return sorted(range(len(records)), key=keys.__getitem__)


def _count(root: Node) -> int:
    """How many nodes hang from ``root``, itself included."""
    count = 0
    stack = [root]
    pop, extend = stack.pop, stack.extend
    while stack:
        extend(pop().children)
        count += 1
    return count


def _process_ref(puid: int, info: ProcessRecord | None) -> ProcessRef:
    if info is None:
        return ProcessRef(puid, 0, UNKNOWN_HOST)
    return ProcessRef(puid, info.pid, info.host, info.state, info.last_seen_ns)


def _start_order(node: Node) -> tuple[int, int, int]:
    return (node.start_ns, node.iid, node.process.puid)


def _synthetic_root(name: str) -> Node:
    return Node(
        name=name,
        start_ns=0,
        end_ns=None,
        duration_ns=None,
        self_ns=None,
        process=ProcessRef(0, 0, UNKNOWN_HOST),
        thread=ThreadRef(0, UNKNOWN_THREAD),
        status=STATUS_INCOMPLETE,
        error=None,
        kind=KIND_SYNTHETIC,
    )


def _break_cycles(root: Node, nodes: list[Node], parents: list[int]) -> None:
    """Nodes on a parent cycle are unreachable from the root; cut each cycle at its earliest node
    and hang that node (with everything beneath it) under the root."""
    reached = {id(node) for node, _ in walk(root)}
    unreached = sorted(
        (i for i, node in enumerate(nodes) if id(node) not in reached),
        key=lambda i: _start_order(nodes[i]),
    )
    for i in unreached:
        node = nodes[i]
        if id(node) in reached:
            continue
        if parents[i] >= 0:
            nodes[parents[i]].children.remove(node)
        root.children.append(node)
        reached.update(id(n) for n, _ in walk(node))
    root.children.sort(key=_start_order)


def _set_self_time(node: Node) -> None:
    """Self time is the part of the node's window that no child covers.

    Children handed off to other threads run in parallel, so their windows are merged (a union),
    never added up; windows are clipped to the node's own, and a child still open when its parent
    ended counts until then."""
    if node.end_ns is None or node.duration_ns is None:
        return
    node.self_ns = max(0, node.duration_ns - covered_ns(node, node.children))


def covered_ns(node: Node, children: Iterable[Node]) -> int:
    """How much of an ended node's window the union of ``children``'s windows covers (each
    clipped to the node's; a child still open counts until the node's end)."""
    return _covered(node, sorted(children, key=lambda c: c.start_ns))


def _covered(node: Node, children: list[Node]) -> int:
    """``covered_ns`` for children already in start order (as ``build_tree`` appends them)."""
    end = node.end_ns
    assert end is not None
    covered = 0
    span_start = span_end = node_start = node.start_ns
    for child in children:  # comparisons rather than max(): this runs once per call
        start = child.start_ns
        if start < node_start:  # noqa: PLR1730 -- a call of max() costs more
            start = node_start
        stop = child.end_ns
        if stop is None or stop > end:
            stop = end
        if stop <= start:
            continue
        if start > span_end:
            covered += span_end - span_start
            span_start = start
        if stop > span_end:  # noqa: PLR1730 -- as above
            span_end = stop
    return covered + span_end - span_start


def _span_children(root: Node, statuses: set[Status]) -> None:
    """A synthetic root lasts from its first child's start to its last child's end. It is running
    while any call is. A remote parent is merely outside this repository, so it is ``ok`` once
    every call here finished; an unknown root stands for lost events, so it stays incomplete."""
    children = root.children
    if STATUS_RUNNING in statuses:
        root.status = STATUS_RUNNING
    elif root.name == REMOTE_PARENT and STATUS_INCOMPLETE not in statuses:
        root.status = STATUS_OK
    else:
        root.status = STATUS_INCOMPLETE
    if not children:
        return
    root.start_ns = min(child.start_ns for child in children)
    ends = [child.end_ns for child in children]
    if all(end is not None for end in ends):
        root.end_ns = max(end for end in ends if end is not None)
        root.duration_ns = max(0, root.end_ns - root.start_ns)
        _set_self_time(root)


def _tree_status(statuses: set[Status]) -> TreeStatus:
    if STATUS_RUNNING in statuses:
        return STATUS_RUNNING
    if STATUS_INCOMPLETE in statuses:
        return STATUS_INCOMPLETE
    return TREE_COMPLETE

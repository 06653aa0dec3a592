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

import operator
from collections.abc import Iterable, Sequence
from typing import Protocol

from cmr.gc_paused import paused_gc
from cmr.store.base import (
    REMOTE_PARENT,
    InvocationRecord,
    SequenceData,
)
from cmr.store.rules import root_rank
from cmr.views.model import (
    KIND_SYNTHETIC,
    STATUS_INCOMPLETE,
    STATUS_OK,
    STATUS_RUNNING,
    TREE_COMPLETE,
    UNKNOWN_HOST,
    UNKNOWN_ROOT,
    UNKNOWN_THREAD,
    Node,
    ProcessRef,
    SequenceTree,
    Status,
    ThreadRef,
    TreeStatus,
    walk,
)
from cmr.views.tree.records import (
    Naming,
    dropped_by,
    dropped_in_window,
    index_records,
    link,
    start_ordered,
)


class Window(Protocol):
    """A call's window: a node, or the record it is made of."""

    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int | None: ...


def build_tree(data: SequenceData) -> SequenceTree:
    """The call tree of ``data``, in time near-linear in its size: one pass over the records
    makes the nodes and finds each one's parent, children are appended in start order (the
    records usually come that way; otherwise one sort of them all), and self times need no walk."""
    with paused_gc():
        return _build(data)


def _build(data: SequenceData) -> SequenceTree:
    records = list(data.invocations)  # columns become records once: every node needs one
    index = index_records(records)
    if sum(len(iids) for iids in index.values()) < len(records):
        records = _unique(records)
        index = index_records(records)
    names = Naming(records, index, data)
    nodes = names.nodes(records)
    links = link(records, index, data.handoffs)
    for i, hop in links.hops.items():
        nodes[i].handoff = hop
    mark_folded(nodes, index, data.folded)
    parents, root_index, remote = links.parents, links.root_index, links.remote

    if root_index is not None:
        root = nodes[root_index]
    elif remote:
        root = _synthetic_root(REMOTE_PARENT)
    else:
        root = _synthetic_root(UNKNOWN_ROOT)
    for i in _start_order_of(records):
        parent = parents[i]
        if parent >= 0:
            node = nodes[i]
            caller = nodes[parent]
            caller.children.append(node)
            stop = node.end_ns  # mostly ended within its caller: one comparison more
            if stop is None or (caller.end_ns is not None and stop > caller.end_ns):
                node.detached = outlives(node, caller)
        elif i != root_index:
            root.children.append(nodes[i])  # an orphan: keep it, under the root

    # A parent that starts before its child (as every real one does) sits before it in start
    # order: no cycle can then hide anything. Otherwise count what the root reaches.
    acyclic = all(map(operator.lt, parents, range(len(parents)))) and start_ordered(records)
    if not acyclic and _count(root) < len(nodes) + (root.kind == KIND_SYNTHETIC):
        _break_cycles(root, nodes, parents)
    for node in [node for node in nodes if node.children and node.duration_ns is not None]:
        node.self_ns = max(0, (node.duration_ns or 0) - _covered(node, node.children))
    followed = root if root.kind != KIND_SYNTHETIC else _synthetic(root, nodes, remote, records)
    return SequenceTree(
        seq=data.seq,
        status=tree_status(followed),
        root=root,
        invocations=len(records) + sum(data.folded.values()),
        threads=names.thread_count,
        processes=len(index),
        dropped_by=dropped_by(data),
        dropped_in_window=dropped_in_window(data),
    )


def mark_folded(
    nodes: list[Node], index: dict[int, dict[int, int]], folded: dict[tuple[int, int], int]
) -> None:
    """Count on each node the calls folded beneath it (``SequenceData.folded``); ``nodes`` are
    the records' nodes by position, as ``index`` places them."""
    for (puid, iid), count in folded.items():
        at = index.get(puid, {}).get(iid)
        if at is not None:
            nodes[at].folded = count


def _unique(invocations: list[InvocationRecord]) -> list[InvocationRecord]:
    """The first record of every (puid, iid): a repeated record must not appear twice."""
    seen: dict[tuple[int, int], InvocationRecord] = {}
    for record in invocations:
        seen.setdefault((record.puid, record.iid), record)
    return list(seen.values())


def _start_order_of(records: list[InvocationRecord]) -> Iterable[int]:
    """Record positions by (start, iid, puid): children appended in this order are sorted. Stores
    usually return records by start already, which costs one pass to confirm."""
    if start_ordered(records):
        return range(len(records))
    keys = [(r.start_ns, r.iid, r.puid) for r in records]
    return sorted(range(len(records)), key=keys.__getitem__)


def _synthetic(
    root: Node, nodes: list[Node], remote: list[int], records: list[InvocationRecord]
) -> Node:
    """Span and status of a made-up root (a remote parent waits on its entries alone), and the
    node whose status the sequence's is (``tree_status``): the root itself, or when the root
    was lost the call a listing names instead."""
    waited = [nodes[i] for i in remote] if root.name == REMOTE_PARENT else nodes
    _span_children(root, {node.status for node in waited})
    if root.name == UNKNOWN_ROOT and records:
        return nodes[_best_candidate(records)]
    return root


def _best_candidate(records: list[InvocationRecord]) -> int:
    """The position of the call ``root_rank`` puts first: a listing names it when the root was
    lost (``store.rules.summary_root``), and the sequence's status follows it."""
    return min(
        range(len(records)),
        key=lambda i: root_rank(
            records[i].parent, records[i].hid, records[i].start_ns, records[i].puid, records[i].iid
        ),
    )


def _count(root: Node) -> int:
    """How many nodes hang from ``root``, itself included."""
    count = 0
    stack = [root]
    pop, extend = stack.pop, stack.extend
    while stack:
        extend(pop().children)
        count += 1
    return count


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


def _break_cycles(root: Node, nodes: list[Node], parents: Sequence[int]) -> None:
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


def _covered(node: Window, children: Sequence[Window]) -> int:
    """``covered_ns`` for children already in start order (as ``build_tree`` appends them);
    anything with a start and an end will do for them (a node, or the record it is made of)."""
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
    """A synthetic root lasts from its first child's start to its last child's end. A remote
    parent is merely outside this repository: it is running while one of its entries is
    (``statuses`` are theirs), ``ok`` once every one ended, incomplete when one never will. An
    unknown root stands for lost events: running while any call is, else incomplete."""
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


def outlives(node: Node, caller: Node) -> bool:
    """Whether a call is *detached*: still open when its caller (which has ended) ended, or
    ending after it: a thread, task or process the caller started and did not wait for, or a
    generator it left suspended. Ends on two processes' clocks are not compared (a skew must
    not detach a call its caller waited for)."""
    end = caller.end_ns
    if end is None:
        return False
    if node.end_ns is None:
        return True
    return node.end_ns > end and node.process.puid == caller.process.puid


covered_in_order = _covered


def tree_status(root: Node) -> TreeStatus:
    """A sequence's status follows its root (``store.rules.sequence_status``): complete once
    it ended, whatever detached work still runs beneath it. A remote parent's status is its
    entries'; when the root was lost, the call a listing names stands for it."""
    if root.status == STATUS_RUNNING:
        return STATUS_RUNNING
    if root.status == STATUS_INCOMPLETE:
        return STATUS_INCOMPLETE
    return TREE_COMPLETE

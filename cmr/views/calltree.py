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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from cmr.store.base import (
    PROCESS_ALIVE,
    REMOTE_PARENT,
    HandoffRecord,
    InvocationRecord,
    MethodRecord,
    ProcessRecord,
    SequenceData,
)

STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_RUNNING = "running"
STATUS_INCOMPLETE = "incomplete"

TREE_COMPLETE = "complete"

#: Node kinds: timed by the tracer at the call itself, made up to hold orphans together, or
#: inferred from stack samples (``cmr.views.merge``).
KIND_MEASURED = "measured"
KIND_SYNTHETIC = "synthetic"
KIND_ESTIMATED = "estimated"

UNKNOWN_ROOT = "<unknown root>"
UNKNOWN_THREAD = "<unknown thread>"
UNKNOWN_HOST = "<unknown host>"

#: The hand-off kind of an invocation that continues one no process here recorded.
HANDOFF_REMOTE = "remote"


@dataclass(frozen=True, slots=True)
class ProcessRef:
    """Where a node ran, and whether that process was still alive when the tree was built
    (``state``: alive, ended or lost; ``last_seen_ns``: its latest batch, 0 when unknown)."""

    puid: int
    pid: int
    host: str
    state: str = PROCESS_ALIVE
    last_seen_ns: int = 0


@dataclass(frozen=True, slots=True)
class ThreadRef:
    tid: int
    name: str


@dataclass(frozen=True, slots=True)
class Handoff:
    """How a node was reached from its caller's thread: ``kind`` of hop, when the work was
    submitted, and how long it waited before this invocation started (0 when clocks disagree).
    Both times are None for a remote parent that was never recorded here."""

    hid: int
    kind: str  # thread | task | process | remote
    submitted_ns: int | None
    queued_ns: int | None


@dataclass(slots=True, eq=False)
class Node:
    """One invocation in the tree. Identity comparison only: two calls are never "equal"."""

    name: str
    start_ns: int
    end_ns: int | None
    duration_ns: int | None
    self_ns: int | None  # duration minus the children's, floored at 0; None while unknown
    process: ProcessRef
    thread: ThreadRef
    status: str  # ok | error | running | incomplete
    error: str | None  # exception type name when the call raised
    iid: int = 0
    kind: str = KIND_MEASURED
    handoff: Handoff | None = None
    children: list[Node] = field(default_factory=list)
    hidden: int = 0  # descendants a view left out beneath this node
    # Sampling (estimated nodes always have them; measured ones once samples are merged in):
    samples: int = 0  # sample weight in this node's subtree, its own included
    self_samples: int = 0  # sample weight whose innermost frame is this node
    cpu_ns: int | None = None  # CPU time estimated from the samples; None without samples
    frame: tuple[str, str, int] | None = None  # an estimated node's (file, function, line)


@dataclass(frozen=True, slots=True)
class SequenceTree:
    seq: bytes
    status: str  # running | incomplete | complete
    root: Node
    invocations: int  # distinct invocations in the data, before any view hides some
    threads: int
    processes: int
    hidden: int = 0  # nodes hidden by views, in total
    samples_skipped: int = 0  # sample weight merge_samples could not place (no frame matched)
    # Processes that reported dropping events of this sequence, by host, pid and puid.
    dropped_by: tuple[ProcessRef, ...] = ()

    @property
    def lossy(self) -> bool:
        """Some events never arrived because their process dropped them: calls may be missing."""
        return bool(self.dropped_by)


def walk(root: Node) -> Iterator[tuple[Node, int]]:
    """Every node with its depth (root = 0), parents before children, children in order."""
    stack: list[tuple[Node, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        stack.extend((child, depth + 1) for child in reversed(node.children))


def method_name(methods: dict[tuple[int, int], MethodRecord], puid: int, method: int) -> str:
    info = methods.get((puid, method))
    if info is None:
        return f"<unknown method {method}>"
    return f"{info.module}.{info.qualname}" if info.module else info.qualname


def build_tree(data: SequenceData) -> SequenceTree:
    records = _unique(data.invocations)
    nodes = _make_nodes(records, data)
    index = {(r.puid, r.iid): i for i, r in enumerate(records)}

    root_index = _find_root(records)
    if root_index is not None:
        root = nodes[root_index]
    elif _mark_remote_entries(records, nodes, data.handoffs):
        root = _synthetic_root(REMOTE_PARENT)
    else:
        root = _synthetic_root(UNKNOWN_ROOT)
    parent_of: list[Node | None] = [None] * len(nodes)
    for i, record in enumerate(records):
        if i == root_index:
            continue
        handoff = data.handoffs.get(record.hid) if record.hid else None
        parent_index = _parent_index(record, handoff, index, i)
        if parent_index is None:
            parent_index = root_index  # an orphan: keep it, under the root
        parent = root if parent_index is None else nodes[parent_index]
        parent.children.append(nodes[i])
        parent_of[i] = parent

    _break_cycles(root, nodes, parent_of)
    order = [node for node, _ in walk(root)]
    for node in order:
        if len(node.children) > 1:
            node.children.sort(key=_start_order)
    for node in reversed(order):
        _set_self_time(node)

    if root.kind == KIND_SYNTHETIC:
        _span_children(root, nodes)
    return SequenceTree(
        seq=data.seq,
        status=_tree_status(order),
        root=root,
        invocations=len(records),
        threads=len({(r.puid, r.tid) for r in records}),
        processes=len({r.puid for r in records}),
        dropped_by=tuple(
            sorted(
                (_process_ref(puid, data.processes.get(puid)) for puid in data.lost_by),
                key=lambda p: (p.host, p.pid, p.puid),
            )
        ),
    )


def _parent_index(
    record: InvocationRecord,
    handoff: HandoffRecord | None,
    index: dict[tuple[int, int], int],
    own: int,
) -> int | None:
    """The submitter of a known hand-off wins over the Start's own parent (which names only the
    same process); a link to a missing node, or to the node itself, is no link."""
    candidates: list[tuple[int, int]] = []
    if handoff is not None and handoff.parent:
        candidates.append((handoff.puid, handoff.parent))
    if record.parent:
        candidates.append((record.puid, record.parent))
    for key in candidates:
        found = index.get(key)
        if found is not None and found != own:
            return found
    return None


def _mark_remote_entries(
    records: list[InvocationRecord], nodes: list[Node], handoffs: dict[int, HandoffRecord]
) -> bool:
    """Give each invocation that continues an unrecorded hand-off without a parent (a foreign
    system's call) its remote hop, whose submit and queue times are unknown. True if any did."""
    found = False
    for record, node in zip(records, nodes, strict=True):
        if record.parent == 0 and record.hid != 0 and record.hid not in handoffs:
            node.handoff = Handoff(record.hid, HANDOFF_REMOTE, None, None)
            found = True
    return found


def _unique(invocations: list[InvocationRecord]) -> list[InvocationRecord]:
    """The first record of every (puid, iid): a repeated record must not appear twice."""
    seen: dict[tuple[int, int], InvocationRecord] = {}
    for record in invocations:
        seen.setdefault((record.puid, record.iid), record)
    return list(seen.values())


def _make_nodes(records: list[InvocationRecord], data: SequenceData) -> list[Node]:
    processes: dict[int, ProcessRef] = {}
    threads: dict[tuple[int, int], ThreadRef] = {}
    names: dict[tuple[int, int], str] = {}
    nodes: list[Node] = []
    for r in records:
        process = processes.get(r.puid)
        if process is None:
            process = processes[r.puid] = _process_ref(r.puid, data.processes.get(r.puid))
        thread = threads.get((r.puid, r.tid))
        if thread is None:
            info = data.threads.get((r.puid, r.tid))
            thread_name = info.name if info is not None else UNKNOWN_THREAD
            thread = threads[(r.puid, r.tid)] = ThreadRef(r.tid, thread_name)
        name = names.get((r.puid, r.method))
        if name is None:
            name = names[(r.puid, r.method)] = method_name(data.methods, r.puid, r.method)
        duration = None if r.end_ns is None else max(0, r.end_ns - r.start_ns)
        handoff = data.handoffs.get(r.hid) if r.hid else None
        nodes.append(
            Node(
                name=name,
                start_ns=r.start_ns,
                end_ns=r.end_ns,
                duration_ns=duration,
                self_ns=None,
                process=process,
                thread=thread,
                status=_status(r, data.processes.get(r.puid)),
                error=r.error,
                iid=r.iid,
                handoff=None if handoff is None else _handoff(handoff, r.start_ns),
            )
        )
    return nodes


def _handoff(record: HandoffRecord, start_ns: int) -> Handoff:
    queued = max(0, start_ns - record.submitted_ns)
    return Handoff(record.hid, record.kind, record.submitted_ns, queued)


def _process_ref(puid: int, info: ProcessRecord | None) -> ProcessRef:
    if info is None:
        return ProcessRef(puid, 0, UNKNOWN_HOST)
    return ProcessRef(puid, info.pid, info.host, info.state, info.last_seen_ns)


def _status(record: InvocationRecord, process: ProcessRecord | None) -> str:
    """An open invocation is incomplete once its process ended or is lost: it will never end."""
    if record.error is not None:
        return STATUS_ERROR
    if record.end_ns is not None:
        return STATUS_OK
    if process is not None and process.finished:
        return STATUS_INCOMPLETE
    return STATUS_RUNNING


def _find_root(records: list[InvocationRecord]) -> int | None:
    """The earliest invocation that neither has a parent nor continues a hand-off."""
    best: int | None = None
    for i, r in enumerate(records):
        candidate = r.parent == 0 and r.hid == 0
        if candidate and (best is None or _record_order(r) < _record_order(records[best])):
            best = i
    return best


def _record_order(record: InvocationRecord) -> tuple[int, int, int]:
    return (record.start_ns, record.iid, record.puid)


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


def _break_cycles(root: Node, nodes: list[Node], parent_of: list[Node | None]) -> None:
    """Nodes on a parent cycle are unreachable from the root; cut each cycle at its earliest node
    and hang that node (with everything beneath it) under the root."""
    reached = {id(node) for node, _ in walk(root)}
    if len(reached) >= len(nodes) + (root.kind == KIND_SYNTHETIC):
        return
    unreached = sorted(
        (i for i, node in enumerate(nodes) if id(node) not in reached),
        key=lambda i: _start_order(nodes[i]),
    )
    for i in unreached:
        node = nodes[i]
        if id(node) in reached:
            continue
        parent = parent_of[i]
        if parent is not None:
            parent.children.remove(node)
        root.children.append(node)
        reached.update(id(n) for n, _ in walk(node))


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
    end = node.end_ns
    assert end is not None
    covered = 0
    span_start = span_end = node.start_ns
    for child in sorted(children, key=lambda c: c.start_ns):
        start = max(child.start_ns, node.start_ns)
        stop = end if child.end_ns is None else min(child.end_ns, end)
        if stop <= start:
            continue
        if start > span_end:
            covered += span_end - span_start
            span_start = start
        span_end = max(span_end, stop)
    return covered + span_end - span_start


def _span_children(root: Node, nodes: list[Node]) -> None:
    """A synthetic root lasts from its first child's start to its last child's end. It is running
    while any call is. A remote parent is merely outside this repository, so it is ``ok`` once
    every call here finished; an unknown root stands for lost events, so it stays incomplete."""
    children = root.children
    statuses = {node.status for node in nodes}
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


def _tree_status(nodes: list[Node]) -> str:
    statuses = {node.status for node in nodes}
    if STATUS_RUNNING in statuses:
        return STATUS_RUNNING
    if STATUS_INCOMPLETE in statuses:
        return STATUS_INCOMPLETE
    return TREE_COMPLETE

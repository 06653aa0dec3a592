"""Merge stack samples into a sequence's call tree, as *estimated* nodes under the measured ones.

``merge_samples(build_tree(data), data)`` runs right after the tree is built, and only when a view
asks for samples (``cmr show --samples``, ``cmr profile``, the exports), so a plain ``cmr show``
never pays for it. It is pure: the tree it is given is left as it was.

**Which node a sample belongs to.** A sample of thread T at time t belongs to the innermost
measured node on T whose window ``[start, end)`` holds t (an open node's window has no end): the
samples inside a measured child on the same thread go to the child, and the samples of a pool
worker land under the hand-off node that ran there. Interleaved asyncio tasks give several such
nodes; the one whose frame is on the stack wins. When none is, and they share the caller whose
frame is (the event loop between two task steps), the sample is that caller's: the stack shows
no task, so none is guessed.

**Cutting the stack.** A node's own frame is the stack frame whose (file, first line) is its
method's; only the frames after it (deeper) are kept. When it is not on the stack (the call was
just starting, or the method's code could not be found), the stack is cut below the deepest frame
of a measured ancestor on the same thread instead; when none is there either, the sample is
skipped and counted (``SequenceTree.samples_skipped``, in sample weight).

**Time.** Ticks are instants. A sample of weight 1 is one tick (at ``ticks``, or anywhere in
its span when its tracer did not say) and stands for ``duration_ns`` from ``t_ns`` on; it
belongs to the calls open at its tick, and is cut at the start and end of its node and at the
start of the node's next measured child on the thread (which has samples of its own). A
collapsed sample (weight N > 1) is N ticks spread over ``[t, t + duration)``: the part inside a
node counts ``round(N * overlap / duration)`` samples and the overlap's time, its CPU time pro
rata; but a part where a measured function its stack shows, which ran on the thread during
the span, had no call open is left out, time and ticks (``duration`` is then the rest): the
span's edges are estimates, and the stack was not there yet (or any more). Each estimated
node's bounds are the gaps between the ticks of its node around its first and last
(``placement.bounds_of``).

**Merging.** The cut stacks of a node merge into a tree: frames with the same signature at the same
depth under the same parent are one node. The signature is (file, function), or with ``lines``
(file, function, line being executed): a caller then splits by the line of the call it is in,
and the innermost function by the line it was running.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from cmr.store.base import FrameRecord, MethodRecord, SampleRecord, SequenceData
from cmr.views.model import (
    KIND_ESTIMATED,
    KIND_MEASURED,
    STATUS_OK,
    Bounds,
    Node,
    SequenceTree,
    walk,
)
from cmr.views.samples.placement import Placement, Seen, Ticks, bounds_of, place_sample
from cmr.views.samples.timeline import OPEN, Call, ThreadCalls, index_threads
from cmr.views.tree.calltree import covered_ns

Signature = tuple[str, str] | tuple[str, str, int]


@dataclass(slots=True, eq=False)
class _Tally:
    """One estimated frame while samples accumulate."""

    frame: tuple[str, str, int]
    weight: int = 0
    self_weight: int = 0
    time: int = 0
    cpu: int = 0
    first: int = OPEN
    last: int = -OPEN
    seen: Seen = field(default_factory=Seen)  # where the samples that saw it fell
    children: dict[Signature, _Tally] = field(default_factory=dict)
    # Placed among interleaved tasks (``Placement.between_tasks``): its time ran while they
    # were open, so it is not fitted into the free time they leave their caller.
    among_tasks: bool = False


@dataclass(slots=True, eq=False)
class _Attributed:
    """What was attributed to one measured call."""

    tallies: dict[Signature, _Tally] = field(default_factory=dict)
    self_weight: int = 0
    self_cpu: int = 0
    # Of each sample placed under the call: its last tick, and its first (``bounds_of``); where
    # its ticks are unknown, the earliest and the latest they can have been.
    lasts: list[int] = field(default_factory=list)
    firsts: list[int] = field(default_factory=list)


def _bounds(attributed: _Attributed, node: Node, seen: Seen) -> Bounds:
    return bounds_of(node, attributed.lasts, attributed.firsts, seen)


def merge_samples(
    tree: SequenceTree,
    data: SequenceData,
    *,
    lines: bool = False,
    free_ns: Callable[[Node], int | None] | None = None,
) -> SequenceTree:
    """A copy of ``tree`` with ``data``'s samples merged in (see the module's docstring).

    Estimated nodes never make a measured node look longer than it was: when the estimated
    children of a measured node add up to more than the time its own thread had free (its window
    less its measured children's on the same thread; work handed to other threads runs in
    parallel and takes nothing from it), all of its estimated subtree (durations and CPU times) is
    scaled down by the same factor to fit. The measured node's ``self_ns`` then drops by what its
    estimated children account for. Estimates placed among interleaved tasks ran while the tasks
    were open, not in that free time: neither scaled nor taken from it. Every node gets
    ``samples``, ``self_samples`` and ``cpu_ns`` (subtree totals; ``cpu_ns`` None where no
    sample fell).

    With no samples, a tree without estimated nodes is returned as it is: the copy would equal
    it (a million calls, never sampled, cost no copy). ``free_ns`` says a measured node's free
    time on its own thread when ``tree`` holds only some of the calls (``bigsamples``); by
    default it is read from the node's children."""
    free = _own_thread_free_ns if free_ns is None else free_ns
    if not data.samples and not _has_estimated(tree.root):
        if data.gaps:
            return dataclasses.replace(tree, unsampled_ns=unsampled(tree, data.gaps))
        return tree
    root, calls = _copy(tree.root, data)
    threads = index_threads(calls)
    ticks = Ticks(data.samples)
    merger = _Merger(data.frames, lines, ticks)
    skipped = 0
    for sample in data.samples:
        thread = threads.get((sample.puid, sample.tid))
        if thread is not None:
            skipped += merger.attribute(sample, thread)
    for call, attributed in merger.attributed.items():
        if attributed.tallies:
            attributed.lasts.sort()
            attributed.firsts.sort()
            bounds = functools.partial(_bounds, attributed)
            _grow(call.node, attributed.tallies, bounds, free)
    _total(root, {id(call.node): found for call, found in merger.attributed.items()})
    return dataclasses.replace(
        tree,
        root=root,
        samples_skipped=tree.samples_skipped + skipped,
        samples_between_tasks=tree.samples_between_tasks + merger.between_tasks,
        loop_busy_ns=tree.loop_busy_ns + merger.loop_busy_ns,
        loop_busy_samples=tree.loop_busy_samples + merger.loop_busy_samples,
        samples_placed=tree.samples_placed + merger.samples_placed,
        unsampled_ns=unsampled(tree, data.gaps),
    )


def unsampled(tree: SequenceTree, gaps: list[SampleRecord]) -> int:
    """How long, within the sequence's time (from its root's start to its end, or to the
    latest gap while it runs), the sampler of one of its processes read no thread: the union
    of its gaps there."""
    start, end = tree.root.start_ns, tree.root.end_ns
    total, reached = 0, start
    for gap_start, gap_end in sorted((g.t_ns, g.t_ns + g.duration_ns) for g in gaps):
        low, high = max(gap_start, reached), gap_end if end is None else min(gap_end, end)
        if high > low:
            total += high - low
            reached = high
    return total


def measured_calls(tree: SequenceTree, data: SequenceData) -> dict[tuple[int, int], ThreadCalls]:
    """The measured calls of ``tree`` per thread (puid, tid), as ``merge_samples`` places
    samples on them (``place_sample``); each ``Call.node`` is a copy of the tree's node."""
    _root, calls = _copy(tree.root, data)
    return index_threads(calls)


def _has_estimated(root: Node) -> bool:
    """Whether an earlier merge left estimated nodes in the tree (a level at a time)."""
    level = [root]
    while level:
        if any(node.kind == KIND_ESTIMATED for node in level):
            return True
        level = [child for node in level for child in node.children]
    return False


def _copy(root: Node, data: SequenceData) -> tuple[Node, list[Call]]:
    """Copy the measured tree (dropping estimated nodes of an earlier merge), with a Call per
    measured node."""
    methods: dict[tuple[int, int], MethodRecord | None] = {
        (r.puid, r.iid): data.methods.get((r.puid, r.method)) for r in data.invocations
    }
    copy = _fresh(root)
    calls: list[Call] = []
    nearest: dict[int, dict[tuple[int, int], Call]] = {id(copy): {}}
    stack = [(root, copy, 0)]
    while stack:
        original, node, depth = stack.pop()
        above = nearest.pop(id(node))
        if node.kind == KIND_MEASURED:
            thread = (node.process.puid, node.thread.tid)
            method = methods.get((node.process.puid, node.iid))
            key = (method.file, method.line) if method is not None and method.file else None
            end = OPEN if node.end_ns is None else max(node.end_ns, node.start_ns + 1)
            call = Call(node, key, above.get(thread), depth, node.start_ns, end)
            calls.append(call)
            above = {**above, thread: call}
        for child in original.children:
            if child.kind == KIND_ESTIMATED:  # an earlier merge took its time from the self time
                if node.self_ns is not None:
                    node.self_ns += child.duration_ns or 0
                continue
            child_copy = _fresh(child)
            node.children.append(child_copy)
            nearest[id(child_copy)] = above
            stack.append((child, child_copy, depth + 1))
    return copy, calls


def _fresh(node: Node) -> Node:
    """A copy without children or samples (spelled out: ``dataclasses.replace`` is several times
    slower, and a tree may have 100,000 nodes)."""
    return Node(
        name=node.name,
        start_ns=node.start_ns,
        end_ns=node.end_ns,
        duration_ns=node.duration_ns,
        self_ns=node.self_ns,
        process=node.process,
        thread=node.thread,
        status=node.status,
        error=node.error,
        iid=node.iid,
        kind=node.kind,
        handoff=node.handoff,
        hidden=node.hidden,
        frame=node.frame,
        bounds=node.bounds,
        attributes=node.attributes,
    )


class _Merger:
    """Places samples on calls and accumulates their cut stacks per call."""

    def __init__(
        self, frames: dict[tuple[int, int], FrameRecord], lines: bool, ticks: Ticks
    ) -> None:
        self._frames = frames
        self._lines = lines
        self._ticks = ticks
        self.attributed: dict[Call, _Attributed] = {}
        self.between_tasks = 0  # sample weight that saw the event loop between task steps
        self.loop_busy_ns = 0  # CPU time of the samples that showed the loop itself
        self.loop_busy_samples = 0  # the weight of those whose thread was mostly on the CPU
        self.samples_placed = 0  # the weight of every placed sample

    def attribute(self, sample: SampleRecord, thread: ThreadCalls) -> int:
        """Attribute one sample within its thread; returns the weight skipped."""
        placements, skipped = place_sample(sample, thread, self._frames)
        if sample.weight == 1 or sample.duration_ns == 0:  # its one tick: anywhere in its span
            until = self._ticks.span_end((sample.puid, sample.tid), sample.t_ns)
            placements = [dataclasses.replace(p, until=until) for p in placements]
        for placement in placements:
            self._add(placement, sample)
            if placement.between_tasks:
                self.between_tasks += placement.count
            if placement.at_loop:
                self.loop_busy_ns += placement.cpu
                if placement.cpu * 2 >= placement.time:
                    self.loop_busy_samples += placement.count
            self.samples_placed += placement.count
        return skipped

    def _add(self, placement: Placement, sample: SampleRecord) -> None:
        call, cut, count, time, cpu = (
            placement.call,
            placement.cut,
            placement.count,
            placement.time,
            placement.cpu,
        )
        attributed = self.attributed.get(call)
        if attributed is None:
            attributed = self.attributed[call] = _Attributed()
        seen = placement.seen()
        if seen is not None:
            known = placement.ticks is not None
            attributed.lasts.append(seen[1] if known else seen[0])
            attributed.firsts.append(seen[0] if known else seen[1])
        else:  # no tick of a collapsed sample fell in the call: its part there
            seen = placement.start, placement.start + max(1, time) - 1
        if cut == len(sample.frames) - 1:
            attributed.self_weight += count
            attributed.self_cpu += cpu
            return
        level = attributed.tallies
        end = placement.start + time
        tally: _Tally | None = None
        for position in range(cut + 1, len(sample.frames)):
            signature, frame = self._describe(
                sample.puid, sample.frames[position], sample.lines[position]
            )
            tally = level.get(signature)
            if tally is None:
                tally = level[signature] = _Tally(frame)
            if position == cut + 1 and placement.between_tasks:
                tally.among_tasks = True
            tally.weight += count
            tally.time += time
            tally.cpu += cpu
            tally.first = min(tally.first, placement.start)
            tally.last = max(tally.last, end)
            tally.seen.add(*seen)
            level = tally.children
        if tally is not None:
            tally.self_weight += count

    def _describe(self, puid: int, frame: int, line: int) -> tuple[Signature, tuple[str, str, int]]:
        """A frame's signature, and its (file, function, line) as the estimated node shows it."""
        record = self._frames.get((puid, frame))
        if record is None:
            record = FrameRecord("", f"<unknown frame {frame}>", 0)
        if self._lines:
            return (record.file, record.function, line), (record.file, record.function, line)
        return (record.file, record.function), (record.file, record.function, record.line)


def _grow(
    node: Node,
    tallies: dict[Signature, _Tally],
    bounds: Callable[[Node, Seen], Bounds],
    free_ns: Callable[[Node], int | None],
) -> None:
    """Hang the estimated subtree under its measured node, scaled down to fit the time its own
    thread had free: its window less what its measured children on the same thread covered
    (but for the tallies placed among interleaved tasks, which ran while those were open).
    (Children handed off to other threads ran in parallel: they take nothing from that time.)"""
    top: list[Node] = []
    built: list[Node] = []  # parents before children, but those placed among tasks
    among: list[Node] = []  # those, parents before children: never scaled down
    stack: list[tuple[_Tally, Node, bool]] = [
        (tally, node, tally.among_tasks) for tally in tallies.values()
    ]
    while stack:
        tally, parent, among_tasks = stack.pop()
        start = max(tally.first, parent.start_ns)
        end = tally.last if parent.end_ns is None else min(tally.last, parent.end_ns)
        child = Node(
            name=tally.frame[1],
            start_ns=start,
            end_ns=max(start, end),
            duration_ns=tally.time,
            self_ns=None,
            process=node.process,
            thread=node.thread,
            status=STATUS_OK,
            error=None,
            kind=KIND_ESTIMATED,
            samples=tally.weight,
            self_samples=tally.self_weight,
            cpu_ns=tally.cpu,
            frame=tally.frame,
            bounds=bounds(node, tally.seen),
        )
        parent.children.append(child)
        if parent is node and not among_tasks:
            top.append(child)
        (among if among_tasks else built).append(child)
        stack.extend((inner, child, among_tasks) for inner in tally.children.values())
    total = sum(_time(child) for child in top)
    limit = free_ns(node)
    if limit is not None and total > limit:
        for child in built:
            child.duration_ns = _time(child) * limit // total
            child.cpu_ns = (child.cpu_ns or 0) * limit // total
    built += among
    for child in reversed(built):
        child.children.sort(key=_start)
        child.self_ns = max(0, _time(child) - sum(_time(inner) for inner in child.children))
    node.children.sort(key=_start)
    if node.self_ns is not None:
        node.self_ns = max(0, node.self_ns - sum(_time(child) for child in top))


def _own_thread_free_ns(node: Node) -> int | None:
    """The node's window less the union of its measured children's windows on its own thread."""
    if node.end_ns is None:
        return None
    own = (node.process.puid, node.thread.tid)
    same_thread = [
        child
        for child in node.children
        if child.kind != KIND_ESTIMATED and (child.process.puid, child.thread.tid) == own
    ]
    return max(0, node.end_ns - node.start_ns - covered_ns(node, same_thread))


def _time(node: Node) -> int:
    return node.duration_ns or 0


def _start(node: Node) -> tuple[int, int]:
    """Children in start order; at the same instant a measured call before an estimated frame."""
    return node.start_ns, node.kind == KIND_ESTIMATED


def _total(root: Node, attributed: dict[int, _Attributed]) -> None:
    """Fill ``samples``, ``self_samples`` and ``cpu_ns`` of every non-estimated node (estimated
    ones got theirs from their tallies): subtree totals, ``cpu_ns`` None where no sample fell."""
    for node, _ in reversed(list(walk(root))):  # children before their parents
        if node.kind == KIND_ESTIMATED:
            continue
        found = attributed.get(id(node))
        own = found.self_weight if found is not None else 0
        samples = own + sum(child.samples for child in node.children)
        cpu = (found.self_cpu if found is not None else 0) + sum(
            child.cpu_ns or 0 for child in node.children
        )
        node.samples = samples
        node.self_samples = own
        node.cpu_ns = cpu if samples else None

"""Pure views over a call tree: each takes a tree and returns a new, smaller one.

The input is never modified, so views chain freely (``drop_shorter_than(limit_depth(t, 3), ms)``).
Whatever a view leaves out is counted on the node it was cut from (``Node.hidden``) and in total
(``SequenceTree.hidden``), so a renderer can say "… 12 calls hidden" instead of silently lying.
Self times are carried over unchanged: time spent in hidden calls stays in the parent's self time
exactly as the builder computed it. ``thread_activity`` summarises a whole tree instead of cutting
it: where the sequence ran, and for how long.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from cmr.views.model import KIND_MEASURED, Node, ProcessRef, SequenceTree, ThreadRef, walk

#: Decides, for a child at ``depth`` (root = 0), whether it stays in the view.
KeepChild = Callable[[Node, int], bool]


def limit_depth(tree: SequenceTree, depth: int) -> SequenceTree:
    """Show ``depth`` levels below the root (0 shows the root alone)."""
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    return keep_only(tree, lambda _node, node_depth: node_depth <= depth)


def drop_shorter_than(tree: SequenceTree, min_duration_ns: int) -> SequenceTree:
    """Hide calls that took less than ``min_duration_ns``; calls without a duration yet (running
    or incomplete) always stay, since how long they take is not known."""
    if min_duration_ns < 0:
        raise ValueError(f"min_duration_ns must be >= 0, got {min_duration_ns}")
    if min_duration_ns == 0:
        return tree
    return keep_only(
        tree, lambda node, _depth: node.duration_ns is None or node.duration_ns >= min_duration_ns
    )


def subtree_size(node: Node) -> int:
    """How many calls the node stands for: itself, its descendants and those already hidden."""
    size = 0
    stack = [node]
    while stack:
        current = stack.pop()
        size += 1 + current.hidden
        stack.extend(current.children)
    return size


def keep_only(tree: SequenceTree, keep: KeepChild) -> SequenceTree:
    """A copy of the tree with the calls ``keep`` keeps (and their callees it keeps); each call
    left out is counted, with everything beneath it, on the caller it was cut from."""
    root = _copy(tree.root)
    hidden = 0
    stack: list[tuple[Node, Node, int]] = [(tree.root, root, 0)]
    while stack:
        original, copy, depth = stack.pop()
        for child in original.children:
            if keep(child, depth + 1):
                child_copy = _copy(child)
                copy.children.append(child_copy)
                stack.append((child, child_copy, depth + 1))
            else:
                size = subtree_size(child)
                copy.hidden += size
                hidden += size
    return dataclasses.replace(tree, root=root, hidden=tree.hidden + hidden)


def _copy(node: Node) -> Node:
    return msgspec.structs.replace(node, children=[])


@dataclass(frozen=True, slots=True)
class ThreadActivity:
    """One thread's share of a sequence."""

    process: ProcessRef
    thread: ThreadRef
    invocations: int
    busy_ns: int  # the union of its invocations' [start, end]: nested calls count once
    first_start_ns: int


def thread_activity(tree: SequenceTree) -> list[ThreadActivity]:
    """The threads a sequence touched, in order of first activity. Give it the whole tree: calls a
    view hid are not in it (frames estimated from samples are not calls and never count). Calls
    without an end yet (running, or incomplete) count as busy up to the latest time the sequence
    shows, the best bound there is."""
    nodes = [node for node, _ in walk(tree.root) if node.kind == KIND_MEASURED]
    if not nodes:
        return []
    latest = max(node.start_ns if node.end_ns is None else node.end_ns for node in nodes)
    spans: dict[tuple[int, int], list[tuple[int, int]]] = {}
    where: dict[tuple[int, int], tuple[ProcessRef, ThreadRef]] = {}
    for node in nodes:
        key = (node.process.puid, node.thread.tid)
        end = latest if node.end_ns is None else node.end_ns
        spans.setdefault(key, []).append((node.start_ns, max(node.start_ns, end)))
        where.setdefault(key, (node.process, node.thread))
    activity = [
        ThreadActivity(*where[key], len(intervals), _covered(intervals), min(intervals)[0])
        for key, intervals in spans.items()
    ]
    activity.sort(key=lambda a: (a.first_start_ns, a.process.puid, a.thread.tid))
    return activity


def _covered(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of (non-empty list of) intervals."""
    ordered = sorted(intervals)
    total = 0
    start, end = ordered[0]
    for next_start, next_end in ordered[1:]:
        if next_start > end:
            total += end - start
            start, end = next_start, next_end
        else:
            end = max(end, next_end)
    return total + end - start

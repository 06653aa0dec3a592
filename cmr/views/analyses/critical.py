"""The critical path of a sequence: the calls that set its end-to-end time, in order.

Walking back from a call's end: the callee it waited for last (the latest to end, at the latest
when the call ended) is on the path; before that callee was handed its work (its hand-off's
submission, or its start for a plain call), the callee that ended last before then is, and so
on back to the call's start; each callee on the path gets the same walk over its own callees.
A hand-off's queue wait is part of its callee's end (it ended late because it started late), so a
short task that waited long in a pool's queue is on the path when its wait made it the last to
finish; its node carries the wait (``Handoff.queued_ns``). A callee in another process may end
a little after its caller by their clocks' disagreement: up to ``CLOCK_SLACK_NS`` is taken as
"before". A callee that outlived its caller (work handed off and not waited for) never is. A
call still running waits for its callees still running first (the latest started).

The path is listed depth first: a call, then the path within its first callee on the path,
then the next callee on it, in time order: the order the calls set the time in.
"""

from __future__ import annotations

from typing import Final

from cmr.views.model import Node, SequenceTree
from cmr.views.render.terms import format_duration, plural
from cmr.views.tree.processors import keep_only

#: How far past its caller's end a callee in another process may end and still count as waited
#: for: clocks of two processes, even on one host, disagree by about this much.
CLOCK_SLACK_NS: Final = 5_000_000


def critical_path(root: Node) -> list[Node]:
    """The calls on the critical path below ``root`` (first), depth first in time order."""
    path: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        path.append(node)
        stack.extend(_waited_for(node))  # latest first: the earliest pops first
    return path


def _waited_for(node: Node) -> list[Node]:
    """The callees on the path of ``node``, the latest first."""
    if not node.children:  # most calls of a big tree: nothing to sort
        return []
    chosen: list[Node] = []
    cursor: int | None = node.end_ns  # None: no end yet, every callee may be waited for
    if cursor is None:
        running = sorted((child for child in node.children if child.end_ns is None), key=_started)
        if running:
            chosen.append(running[-1])
            cursor = _started(running[-1])
    ended = sorted((c for c in node.children if c.end_ns is not None), key=_end, reverse=True)
    for child in ended:
        if cursor is None or _end(child) <= cursor + _slack(node, child):
            chosen.append(child)
            cursor = _started(child)
    return chosen


def _end(node: Node) -> int:
    assert node.end_ns is not None
    return node.end_ns


def _started(node: Node) -> int:
    """When the caller handed the callee its work: its hand-off's submission, else its start."""
    handoff = node.handoff
    if handoff is not None and handoff.submitted_ns is not None:
        return min(handoff.submitted_ns, node.start_ns)
    return node.start_ns


def _slack(caller: Node, callee: Node) -> int:
    """How far past a time a callee in another process may end and still count as before."""
    return CLOCK_SLACK_NS if callee.process.puid != caller.process.puid else 0


def path_tree(tree: SequenceTree, path: list[Node]) -> SequenceTree:
    """The tree with only the calls of ``path`` in it, every other call counted as hidden
    beneath its caller (``Node.hidden``)."""
    on_path = {id(node) for node in path}
    return keep_only(tree, lambda node, _depth: id(node) in on_path)


def describe_path(path: list[Node]) -> str:
    """One line above the path's tree: how many calls, the end-to-end time they set, and how
    much of it they waited in queues."""
    root = path[0]
    queued = sum(node.handoff.queued_ns or 0 for node in path[1:] if node.handoff is not None)
    span = "still running" if root.duration_ns is None else format_duration(root.duration_ns)
    line = f"critical path: {plural(len(path), 'call')}, {span} end to end"
    return line + (f", {format_duration(queued)} of it queued" if queued else "")

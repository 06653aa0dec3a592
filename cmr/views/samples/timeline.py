"""The measured calls of each thread, searchable by time: which calls hold an instant, and where
a span crosses the edge of one. ``merge_samples`` asks this for every sample.

Per thread the calls form a forest (a call's parent is its nearest measured caller on the same
thread). Each level of it is sorted by start with a running maximum of ends, so the calls holding
an instant are found by bisection plus a short scan back, even where asyncio tasks interleave and
windows overlap without nesting.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import Final

from cmr.views.model import Node

#: The end of a call that has not ended (yet).
OPEN: Final = 2**63 - 1
FrameKey = tuple[str, int]  # (file, first line): how a measured method is found on a stack


@dataclass(slots=True, eq=False)
class Level:
    """Calls of one thread under one parent, by start."""

    calls: list[Call] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    reach: list[int] = field(default_factory=list)  # the latest end among calls[: i + 1]

    def seal(self) -> None:
        self.calls.sort(key=lambda call: call.start)
        self.starts = [call.start for call in self.calls]
        latest = -OPEN
        self.reach = []
        for call in self.calls:
            latest = max(latest, call.end)
            self.reach.append(latest)

    def containing(self, t: int) -> list[Call]:
        found = []
        at = bisect.bisect_right(self.starts, t) - 1
        while at >= 0 and self.reach[at] > t:
            if self.calls[at].end > t:
                found.append(self.calls[at])
            at -= 1
        return found

    def next_start_after(self, t: int) -> int:
        at = bisect.bisect_right(self.starts, t)
        return self.starts[at] if at < len(self.starts) else OPEN


@dataclass(slots=True, eq=False)
class Call:
    """A measured node of the tree, with its window ``[start, end)`` on its thread."""

    node: Node
    key: FrameKey | None  # its method's (file, first line); None when unknown
    parent: Call | None  # the nearest measured caller on the same thread
    depth: int  # in the tree
    start: int
    end: int
    inner: Level = field(default_factory=Level)  # its measured callees on the same thread


class ThreadCalls:
    """The calls of one thread. Which calls hold an instant only changes at a call's start or
    end, so the answer is kept per stretch between two such edges: the samples of a deep
    recursion, all in its innermost call, descend the chain once."""

    def __init__(self, outermost: Level, edges: list[int]) -> None:
        self._outermost = outermost
        self._edges = edges  # every start and end, sorted, once
        self._memo: dict[int, list[Call]] = {}

    def innermost(self, t: int) -> list[Call]:
        """The calls holding ``t`` that no callee on the thread holds too."""
        stretch = bisect.bisect_right(self._edges, t)
        found = self._memo.get(stretch)
        if found is None:
            found = self._memo[stretch] = _innermost(self._outermost, t)
        return found

    def pieces(self, start: int, end: int) -> list[tuple[int, int]]:
        """``[start, end)`` cut wherever a call of the thread starts or ends inside it."""
        first = bisect.bisect_right(self._edges, start)
        last = bisect.bisect_left(self._edges, end)
        return list(itertools.pairwise([start, *self._edges[first:last], end]))


def index_threads(calls: list[Call]) -> dict[tuple[int, int], ThreadCalls]:
    """Per thread (puid, tid), its calls; every call gets its callees there."""
    outermost: dict[tuple[int, int], Level] = {}
    edges: dict[tuple[int, int], set[int]] = {}
    for call in calls:
        key = (call.node.process.puid, call.node.thread.tid)
        if call.parent is not None:
            call.parent.inner.calls.append(call)
        else:
            outermost.setdefault(key, Level()).calls.append(call)
        edges.setdefault(key, set()).update((call.start, call.end))
    for call in calls:
        call.inner.seal()
    for level in outermost.values():
        level.seal()
    return {key: ThreadCalls(level, sorted(edges[key])) for key, level in outermost.items()}


def _innermost(level: Level, t: int) -> list[Call]:
    found = []
    stack = level.containing(t)
    while stack:
        call = stack.pop()
        deeper = call.inner.containing(t)
        if deeper:
            stack.extend(deeper)
        else:
            found.append(call)
    return found

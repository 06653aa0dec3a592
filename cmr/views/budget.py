"""Which calls of a big tree fit on a screen: a line budget, spent on the longest calls first.

A 1,000,000-call sequence printed in full is a million lines nobody reads. ``choose`` keeps at
most ``max_lines`` lines of tree: the root, then always the longest call not shown yet whose
caller is shown (a call without a duration yet counts as the longest: it is where time is going
now), so the hot paths come out whole and the crowd of short calls stays folded. The calls of a
caller that did not fit become one *fold* line beneath its shown children, which says how many
they are, how long they took together and which names repeat among them and how often, so a
loop of identical calls reads as one. A tree that fits is left alone: it prints exactly as
it would without a budget.

The work is bounded by what is shown: each shown caller's children are ranked once (the best
``max_lines`` of them when there are more), and a fold counts the calls beneath it with one walk,
so the cost grows with the hidden calls only by a counting pass, never by sorting them.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field

from cmr.views._gc import paused_gc
from cmr.views.model import Node

#: Lines of tree ``cmr show`` prints unless told otherwise (``--max-nodes``).
DEFAULT_MAX_NODES = 2_000
#: Repeated names a fold line spells out, most time first.
FOLD_NAMES = 3
#: Priority of a call without a duration yet: ahead of every finished one.
_OPEN = 2**63


@dataclass(frozen=True, slots=True)
class Fold:
    """Calls of one caller left out by the budget, summed up on one line."""

    calls: int  # the caller's children left out
    beneath: int  # calls under those children (not counting those a view hid already)
    total_ns: int  # the left-out children's durations, added up (finished ones)
    running: int  # left-out children without a duration (running or incomplete)
    repeated: tuple[tuple[str, int, int], ...]  # (name, calls, total_ns), names called twice+


@dataclass(slots=True)
class Selection:
    """What ``render_text`` draws of a tree too big for its budget: per shown node (by ``id``)
    its shown children, in start order, and the fold of those left out."""

    shown: dict[int, list[Node]] = field(default_factory=dict)
    folds: dict[int, Fold] = field(default_factory=dict)
    nodes: int = 0  # nodes shown
    hidden: int = 0  # nodes left out by the budget, folded


def fits(root: Node, max_lines: int) -> bool:
    """Whether the whole tree takes at most ``max_lines`` lines (a node each, and one more for
    each node with calls a view hid). Stops counting as soon as it is over."""
    lines = 0
    stack = [root]
    while stack:
        node = stack.pop()
        lines += 2 if node.hidden else 1
        if lines > max_lines:
            return False
        stack.extend(node.children)
    return True


def choose(root: Node, max_lines: int) -> Selection:
    """Spend ``max_lines`` lines (at least the root and its fold) on the longest calls first."""
    with paused_gc():  # a big tree is millions of live objects: a collection would scan them all
        return _choose(root, max_lines)


def _choose(root: Node, max_lines: int) -> Selection:
    selection = Selection()
    shown = selection.shown
    lines = _own_lines(root)
    shown[id(root)] = []
    selection.nodes = 1
    ranked: dict[int, tuple[list[Node], list[int]]] = {}  # id -> children, ranking
    tiebreak = itertools.count()
    heap: list[tuple[int, int, Node, int]] = []  # (-priority, tiebreak, caller, rank position)
    _offer(heap, root, 0, ranked=ranked, max_lines=max_lines, tiebreak=tiebreak)
    while heap:
        _, _, caller, position = heapq.heappop(heap)
        children, ranking = ranked[id(caller)]
        child = children[ranking[position]]
        siblings_shown = shown[id(caller)]
        last = len(siblings_shown) + 1 == len(children)  # the caller's fold line goes away
        cost = _own_lines(child) - last
        if lines + cost > max_lines:
            break
        lines += cost
        siblings_shown.append(child)
        shown[id(child)] = []
        selection.nodes += 1
        _offer(heap, caller, position + 1, ranked=ranked, max_lines=max_lines, tiebreak=tiebreak)
        _offer(heap, child, 0, ranked=ranked, max_lines=max_lines, tiebreak=tiebreak)
    for node_id, (children, _) in ranked.items():
        kept = shown[node_id]
        if len(kept) < len(children):
            ids = {id(child) for child in kept}
            left_out = [child for child in children if id(child) not in ids]
            fold = _fold(left_out)
            selection.folds[node_id] = fold
            selection.hidden += fold.calls + fold.beneath
            if len(kept) > 1:  # chosen by length: draw them in start order again
                order = {id(child): i for i, child in enumerate(children)}
                kept.sort(key=lambda child: order[id(child)])
    return selection


def _own_lines(node: Node) -> int:
    """Lines a newly shown node adds: its own, its fold line while none of its children is
    shown, and the line of the calls a view hid beneath it."""
    return 1 + (1 if node.children else 0) + (1 if node.hidden else 0)


def _offer(
    heap: list[tuple[int, int, Node, int]],
    caller: Node,
    position: int,
    *,
    ranked: dict[int, tuple[list[Node], list[int]]],
    max_lines: int,
    tiebreak: itertools.count[int],
) -> None:
    """Push the caller's ``position``-th longest child, ranking its children on first use."""
    children = caller.children
    if not children:
        return
    entry = ranked.get(id(caller))
    if entry is None:
        entry = ranked[id(caller)] = (children, _rank(children, max_lines))
    ranking = entry[1]
    if position < len(ranking):
        child = children[ranking[position]]
        heapq.heappush(heap, (-_priority(child), next(tiebreak), caller, position))


def _rank(children: list[Node], limit: int) -> list[int]:
    """Positions of the (at most ``limit``) longest children, longest first; ties by start."""
    positions = range(len(children))
    priorities = [_priority(child) for child in children]
    if len(children) <= limit:
        return sorted(positions, key=lambda i: -priorities[i])
    return heapq.nlargest(limit, positions, key=lambda i: (priorities[i], -i))


def _priority(node: Node) -> int:
    return _OPEN if node.duration_ns is None else node.duration_ns


def _fold(left_out: list[Node]) -> Fold:
    beneath = 0
    level = [child for child in left_out if child.children]
    while level:  # a level at a time: comprehensions, as a fold may hide most of a big tree
        beneath += sum([len(node.children) for node in level])
        level = [child for node in level for child in node.children if child.children]
    counts = Counter(child.name for child in left_out)
    repeated_names = {name for name, count in counts.items() if count > 1}
    totals = dict.fromkeys(repeated_names, 0)
    total = running = 0
    for child in left_out:
        duration = child.duration_ns
        if duration is None:
            running += 1
            continue
        total += duration
        if child.name in totals:
            totals[child.name] += duration
    repeated = sorted(
        ((name, counts[name], spent) for name, spent in totals.items()),
        key=lambda entry: (-entry[2], -entry[1], entry[0]),
    )[:FOLD_NAMES]
    return Fold(len(left_out), beneath, total, running, tuple(repeated))

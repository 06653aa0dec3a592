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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from cmr.gc_paused import paused_gc
from cmr.views.model import Node

T = TypeVar("T")

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
        shown, folds, count, hidden = select(root, max_lines, NODE_TREE)
    selection = Selection(nodes=count, hidden=hidden)
    selection.shown = {id(node): children for node, children in shown.items()}
    selection.folds = {id(node): fold for node, fold in folds.items()}
    return selection


class TreeAccess(Protocol[T]):
    """How ``select`` reads a tree whose nodes are ``T`` (nodes, or positions in columns)."""

    def children(self, node: T) -> Sequence[T]:
        """In start order."""

    def own_lines(self, node: T) -> int:
        """Lines a newly shown node adds (``_own_lines``)."""

    def priority(self, node: T) -> int:
        """Its duration; ``_OPEN`` without one."""

    def ranking(self, nodes: Sequence[T], limit: int) -> list[int]:
        """Positions in ``nodes`` of the (at most ``limit``) highest priorities, highest
        first, ties in order (``rank``)."""

    def fold(self, left_out: Sequence[T]) -> Fold: ...


def select(
    root: T, max_lines: int, tree: TreeAccess[T]
) -> tuple[dict[T, list[T]], dict[T, Fold], int, int]:
    """The budget's choice (module docstring) on any tree: per shown node its shown children in
    start order, the folds, how many nodes are shown and how many are hidden. ``T`` must hash
    by identity (a ``Node``, whose equality is identity, or a position)."""
    shown: dict[T, list[T]] = {root: []}
    folds: dict[T, Fold] = {}
    lines = tree.own_lines(root)
    count = 1
    ranked: dict[T, tuple[Sequence[T], list[int]]] = {}  # caller -> children, ranking
    tiebreak = itertools.count()
    heap: list[tuple[int, int, int, T]] = []  # (-priority, tiebreak, rank position, caller)

    def offer(caller: T, position: int) -> None:
        """Push the caller's ``position``-th longest child: its longest found on first use, its
        children ranked when a second is asked for (most callers in a big tree never show
        more than one, or none, of theirs)."""
        entry = ranked.get(caller)
        if entry is None:
            children = tree.children(caller)
            if not children:
                return
            entry = ranked[caller] = (children, tree.ranking(children, 1))
        children, ranking = entry
        if position == len(ranking) == 1 < len(children):
            ranking = tree.ranking(children, max_lines)
            ranked[caller] = (children, ranking)
        if position < len(ranking):
            child = children[ranking[position]]
            heapq.heappush(heap, (-tree.priority(child), next(tiebreak), position, caller))

    offer(root, 0)
    while heap:
        _, _, position, caller = heapq.heappop(heap)
        children, ranking = ranked[caller]
        child = children[ranking[position]]
        siblings_shown = shown[caller]
        last = len(siblings_shown) + 1 == len(children)  # the caller's fold line goes away
        cost = tree.own_lines(child) - last
        if lines + cost > max_lines:
            break
        lines += cost
        siblings_shown.append(child)
        shown[child] = []
        count += 1
        offer(caller, position + 1)
        offer(child, 0)
    hidden = 0
    for caller, (children, _) in ranked.items():
        kept = shown[caller]
        if len(kept) < len(children):
            left_out: Sequence[T] = children  # every one, as they are (the common case)
            if kept:
                left_out = list(itertools.filterfalse(set(kept).__contains__, children))
            fold = folds[caller] = tree.fold(left_out)
            hidden += fold.calls + fold.beneath
            if len(kept) > 1:  # chosen by length: draw them in start order again
                order = {child: i for i, child in enumerate(children)}
                kept.sort(key=order.__getitem__)
    return shown, folds, count, hidden


def _own_lines(node: Node) -> int:
    """Lines a newly shown node adds: its own, its fold line while none of its children is
    shown, and the line of the calls a view hid beneath it."""
    return 1 + (1 if node.children else 0) + (1 if node.hidden else 0)


def rank(priorities: list[int], limit: int) -> list[int]:
    """Positions of the (at most ``limit``) longest children, longest first; ties by start."""
    positions = range(len(priorities))
    if len(priorities) <= limit:  # a stable sort: reversed, ties stay in start order
        return sorted(positions, key=priorities.__getitem__, reverse=True)
    return heapq.nlargest(limit, positions, key=lambda i: (priorities[i], -i))


def _priority(node: Node) -> int:
    return priority_of(node.duration_ns)


def priority_of(duration_ns: int | None) -> int:
    """A call's claim on the budget: its duration; one without a duration yet comes first."""
    return _OPEN if duration_ns is None else duration_ns


class _NodeTree:
    """``TreeAccess`` of a tree of nodes."""

    def children(self, node: Node) -> Sequence[Node]:
        return node.children

    def own_lines(self, node: Node) -> int:
        return _own_lines(node)

    def priority(self, node: Node) -> int:
        return _priority(node)

    def ranking(self, nodes: Sequence[Node], limit: int) -> list[int]:
        return rank([_priority(node) for node in nodes], limit)

    def fold(self, left_out: Sequence[Node]) -> Fold:
        return _fold(left_out)


NODE_TREE: Final = _NodeTree()


def _fold(left_out: Sequence[Node]) -> Fold:
    """The fold of the left-out children of a tree of nodes."""
    beneath = count_beneath(left_out)
    return make_fold([c.name for c in left_out], [c.duration_ns for c in left_out], beneath)


class _Parent(Protocol):
    """Anything with children of its own kind: a node, a profile line."""

    @property
    def children(self) -> Sequence[_Parent]: ...


def count_beneath(parents: Sequence[_Parent]) -> int:
    """How many nodes hang below ``parents``: a level at a time, in comprehensions, as a fold may
    hide most of a big tree."""
    count = 0
    level = [node for node in parents if node.children]
    while level:
        count += sum([len(node.children) for node in level])
        level = [child for node in level for child in node.children if child.children]
    return count


def make_fold(names: list[str], durations: list[int | None], beneath: int) -> Fold:
    """The fold of left-out calls with these names and durations (None: not ended), and
    ``beneath`` calls under them."""
    counts = Counter(names)
    repeated_names = {name for name, count in counts.items() if count > 1}
    totals = dict.fromkeys(repeated_names, 0)
    total = running = 0
    for name, duration in zip(names, durations, strict=True):
        if duration is None:
            running += 1
            continue
        total += duration
        if name in totals:
            totals[name] += duration
    repeated = sorted(
        ((name, counts[name], spent) for name, spent in totals.items()),
        key=lambda entry: (-entry[2], -entry[1], entry[0]),
    )[:FOLD_NAMES]
    return Fold(len(names), beneath, total, running, tuple(repeated))

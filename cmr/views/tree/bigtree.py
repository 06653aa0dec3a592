"""A tree too big for its line budget, built only as far as it is shown.

``cmr show`` of a million calls prints 2,000 lines: making a node of every call (and the self time
of every caller) to print two thousand of them is most of its cost. ``shown_tree`` runs the line
budget (``budget.select``) on positions in the records instead: each record's parent and the
children of each position (one pass at C speed), and a call's duration and name read from its
record when the budget asks. Only the calls it shows become nodes, with their self times; a fold
counts the calls beneath it a level at a time. The text is the one the
whole tree would print, line for line (the tests compare them).

It takes the common case only: records in start order, every parent before its child (so no
cycle), a true root, no duplicates, and a plain view (no samples, depth or minimum duration).
Anything else returns None and the caller builds the whole tree, whose rules cover every case.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Final

from cmr.gc_paused import paused_gc
from cmr.store.base import InvocationRecord, SequenceData
from cmr.store.column_passes import covered, fold_sums, ranked, spans
from cmr.store.columns import RecordColumns, distinct_values
from cmr.views.model import Node, SequenceTree
from cmr.views.tree.budget import (
    FOLD_NAMES,
    Fold,
    Selection,
    TreeAccess,
    make_fold,
    priority_of,
    rank,
    select,
)
from cmr.views.tree.calltree import covered_in_order, outlives, tree_status
from cmr.views.tree.records import Naming, dropped_by, dropped_in_window
from cmr.views.tree.shape import Shape, row_names, tree_shape


def shown_tree(data: SequenceData, max_lines: int) -> tuple[SequenceTree, Selection] | None:
    """The tree's shown nodes and the budget's selection of them, or None when the whole tree
    must be built (module docstring): it fits, or it is not the common case."""
    records = data.invocations
    count = len(records)
    if not max_lines or count <= max_lines:  # it fits: printed in full, as it is
        return None
    with paused_gc():
        return _shown_tree(data, records, max_lines)


def _shown_tree(
    data: SequenceData, records: Sequence[InvocationRecord], max_lines: int
) -> tuple[SequenceTree, Selection] | None:
    shape = tree_shape(records, data.handoffs)
    if shape is None:
        return None
    root = shape.root
    naming = _naming(records, data)
    access: TreeAccess[int] = (
        _ColumnTree(records, shape, naming)
        if isinstance(records, RecordColumns)
        else _RecordTree(records, shape, naming)
    )
    shown, folds, nodes_shown, hidden = select(root, max_lines, access)
    tree, node_at = _tree_of(data, shape, naming, shown, {})
    selection = Selection(nodes=nodes_shown, hidden=hidden)
    selection.shown = {id(node): node.children for node in node_at.values()}
    selection.folds = {id(node_at[i]): fold for i, fold in folds.items()}
    return tree, selection


def longer_tree(data: SequenceData, min_duration_ns: int) -> SequenceTree | None:
    """``drop_shorter_than(build_tree(data), min_duration_ns)`` without a node of any call it
    leaves out: the calls that lasted ``min_duration_ns`` or more (or have not ended), each one
    left out counted, with everything beneath it, on the call it was cut from (``Node.hidden``).
    None when it is not the common case (module docstring)."""
    records = data.invocations
    with paused_gc():
        shape = tree_shape(records, data.handoffs)
        if shape is None:
            return None
        duration = shape.duration
        kept_under: dict[int, list[int]] = {}
        hidden_at: dict[int, int] = {}
        todo = [shape.root]
        while todo:
            at = todo.pop()
            kept: list[int] = []
            left_out: list[int] = []
            for callee in shape.callees(at):
                spent = duration(callee)
                (kept if spent is None or spent >= min_duration_ns else left_out).append(callee)
            kept_under[at] = kept
            todo.extend(kept)
            if left_out:
                hidden_at[at] = len(left_out) + shape.beneath(left_out)
        tree, _ = _tree_of(data, shape, _naming(records, data), kept_under, hidden_at)
        return tree


def _tree_of(
    data: SequenceData,
    shape: Shape,
    naming: Naming,
    children: dict[int, list[int]],
    hidden_at: dict[int, int],
) -> tuple[SequenceTree, dict[int, Node]]:
    """The tree of the positions ``children`` holds (each with its callees shown, in start
    order), their nodes made now, each with the calls ``hidden_at`` says it hides; and the nodes
    by position."""
    records = data.invocations
    positions = sorted(children)
    made = naming.nodes([records[i] for i in positions])
    node_at = dict(zip(positions, made, strict=True))
    for (puid, iid), folded in data.folded.items():
        at = shape.locate(puid, iid)
        if at in node_at:
            node_at[at].folded = folded
    hops = shape.links.hops
    for i, node in node_at.items():
        hop = hops.get(i)
        if hop is not None:
            node.handoff = hop
        node.children = [node_at[child] for child in children[i]]
        node.hidden = hidden_at.get(i, 0)
        callees = shape.callees(i)
        if len(callees) and node.duration_ns is not None:
            node.self_ns = max(0, node.duration_ns - _covered(records, node, callees))
    for node in node_at.values():
        for child in node.children:
            child.detached = outlives(child, node)
    root_node = node_at[shape.root]
    tree = SequenceTree(
        seq=data.seq,
        status=tree_status(root_node),
        root=root_node,
        invocations=len(records) + sum(data.folded.values()),
        threads=naming.thread_count,
        processes=shape.processes,
        dropped_by=dropped_by(data),
        dropped_in_window=dropped_in_window(data),
        hidden=sum(hidden_at.values()),
    )
    return tree, node_at


def _naming(records: Sequence[InvocationRecord], data: SequenceData) -> Naming:
    return Naming(records, sorted(distinct_values(records, "puid")), data)


def _covered(records: Sequence[InvocationRecord], node: Node, callees: Sequence[int]) -> int:
    """How much of the node's window its callees (positions in start order) cover."""
    if isinstance(records, RecordColumns):
        assert node.end_ns is not None
        return covered(records, array("q", callees), node.start_ns, node.end_ns)
    return covered_in_order(node, [records[child] for child in callees])


class _RecordTree:
    """The tree as positions in a list of records (``budget.TreeAccess``), from its
    ``Shape``."""

    __slots__ = ("_records", "_shape", "naming")

    def __init__(self, records: Sequence[InvocationRecord], shape: Shape, naming: Naming) -> None:
        self._records = records
        self._shape = shape
        self.naming = naming

    def children(self, node: int) -> Sequence[int]:
        return self._shape.callees(node)

    def own_lines(self, node: int) -> int:
        return 2 if len(self._shape.callees(node)) else 1

    def priority(self, node: int) -> int:
        return priority_of(self._shape.duration(node))

    def ranking(self, nodes: Sequence[int], limit: int) -> list[int]:
        return rank([priority_of(self._shape.duration(node)) for node in nodes], limit)

    def fold(self, left_out: Sequence[int]) -> Fold:
        records, names = self._records, self.naming.names
        return make_fold(
            [names[records[i].puid][records[i].method] for i in left_out],
            [self._shape.duration(i) for i in left_out],
            self._shape.beneath(left_out),
        )


#: Method ids below this are keys of a fold's sums as they are (an array of sums each).
_FEW_METHODS: Final = 1 << 16


class _ColumnTree:
    """The tree as rows of ``RecordColumns`` (``budget.TreeAccess``): priorities read from one
    array, and a fold's sums made in C (``column_passes.fold_sums``), so the calls a fold hides
    never become objects."""

    __slots__ = ("_names", "_priority", "_ranks", "_records", "_shape", "_text", "_unique")

    def __init__(self, records: RecordColumns, shape: Shape, naming: Naming) -> None:
        self._records = records
        self._shape = shape
        methods = naming.names
        if len(methods) == 1 and max(next(iter(methods.values())), default=0) < _FEW_METHODS:
            # One process with small method ids (every real one): a row's method is its key.
            self._names: array[int] = records.method
            self._text: dict[int, str] = next(iter(methods.values()))
        else:
            named, text = row_names(records, naming)
            self._names, self._text = named, dict(enumerate(text))
        self._priority = spans(records)
        # Whether each key names a method no other key names (then a key's sums are its name's).
        self._unique = len(set(self._text.values())) == len(self._text)
        self._ranks: dict[int, int] | None = None  # each key's place by name, made on first use

    def children(self, node: int) -> Sequence[int]:
        return self._shape.callees(node)

    def own_lines(self, node: int) -> int:
        return 2 if len(self._shape.callees(node)) else 1

    def priority(self, node: int) -> int:
        return self._priority[node]

    def ranking(self, nodes: Sequence[int], limit: int) -> list[int]:
        return ranked(array("q", nodes), self._priority, limit)

    def fold(self, left_out: Sequence[int]) -> Fold:
        rows = left_out if isinstance(left_out, array) else array("q", left_out)
        by_key, running, total = fold_sums(self._records, rows, self._names)
        if self._unique:
            if self._ranks is None:
                self._ranks = name_ranks(self._text)
            sums = [(spent, calls, key) for key, (calls, spent) in by_key.items() if calls > 1]
            repeated = _longest(sums, self._text, self._ranks)
        else:
            by_name: dict[str, list[int]] = {}  # two methods may share a name
            for key, (calls, spent) in by_key.items():
                found = by_name.setdefault(self._text[key], [0, 0])
                found[0] += calls
                found[1] += spent
            repeated = sorted(
                ((name, calls, spent) for name, (calls, spent) in by_name.items() if calls > 1),
                key=_by_time,
            )[:FOLD_NAMES]
        return Fold(len(rows), self._shape.beneath(rows), total, running, tuple(repeated))


def _by_time(entry: tuple[str, int, int]) -> tuple[int, int, str]:
    """A fold's order of repeated names: the longest in all first, then the most called, then
    by name."""
    name, calls, spent = entry
    return -spent, -calls, name


def name_ranks(text: dict[int, str]) -> dict[int, int]:
    """Each key's place among ``text``'s names in name order (names unique)."""
    return {key: place for place, key in enumerate(sorted(text, key=text.__getitem__))}


def _longest(
    sums: list[tuple[int, int, int]], text: dict[int, str], ranks: dict[int, int]
) -> list[tuple[str, int, int]]:
    """The ``FOLD_NAMES`` first of ``sums`` (time, calls, key) in ``_by_time``'s order, named:
    one sort of int tuples in C, names compared by their ranks (``name_ranks``), which are in
    their order (a thousand folds of forty names that tie made forty thousand key calls)."""
    order = [(spent, calls, -ranks[key], key) for spent, calls, key in sums]
    order.sort(reverse=True)  # the longest, then the most called, then the first by name
    return [(text[key], calls, spent) for spent, calls, _rank, key in order[:FOLD_NAMES]]

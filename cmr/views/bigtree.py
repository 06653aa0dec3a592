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

import operator
from collections.abc import Sequence

from cmr.store.base import InvocationRecord, SequenceData
from cmr.views._gc import paused_gc
from cmr.views.budget import Fold, Selection, make_fold, priority_of, select
from cmr.views.calltree import covered_in_order, tree_status
from cmr.views.model import SequenceTree, Status
from cmr.views.records import (
    Naming,
    children_lists,
    dropped_by,
    duration,
    held_under,
    index_records,
    link,
    start_ordered,
)


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
    data: SequenceData, records: list[InvocationRecord], max_lines: int
) -> tuple[SequenceTree, Selection] | None:
    count = len(records)
    index = index_records(records)
    if sum(len(iids) for iids in index.values()) < count:
        return None
    links = link(records, index, data.handoffs)
    root = links.root_index
    parents = links.parents
    if (
        root is None
        or not start_ordered(records)
        or not all(map(operator.lt, parents, range(count)))
    ):
        return None
    columns = _Columns(records, parents, root, Naming(records, index, data))
    shown, folds, nodes_shown, hidden = select(root, max_lines, columns)

    positions = sorted(shown)
    made = columns.naming.nodes([records[i] for i in positions])
    node_at = dict(zip(positions, made, strict=True))
    for (puid, iid), folded in data.folded.items():
        at = index.get(puid, {}).get(iid)
        if at is not None and at in node_at:
            node_at[at].folded = folded
    for i, node in node_at.items():
        hop = links.hops.get(i)
        if hop is not None:
            node.handoff = hop
        node.children = [node_at[child] for child in shown[i]]
        children = columns.children(i)
        if children and node.duration_ns is not None:
            below = [records[child] for child in children]
            node.self_ns = max(0, node.duration_ns - covered_in_order(node, below))
    open_status = columns.naming.open_status
    statuses: set[Status] = {open_status[r.puid] for r in records if r.end_ns is None}
    root_node = node_at[root]
    tree = SequenceTree(
        seq=data.seq,
        status=tree_status(statuses | {root_node.status}),
        root=root_node,
        invocations=count + sum(data.folded.values()),
        threads=columns.naming.thread_count,
        processes=len(index),
        dropped_by=dropped_by(data),
    )
    selection = Selection(nodes=nodes_shown, hidden=hidden)
    selection.shown = {id(node_at[i]): node_at[i].children for i in positions}
    selection.folds = {id(node_at[i]): fold for i, fold in folds.items()}
    return tree, selection


class _Columns:
    """The tree as positions in the records (``budget.TreeAccess``): children in start order
    (orphans under the root, as ``build_tree`` hangs them), built at C speed."""

    __slots__ = ("_children", "_records", "naming")

    def __init__(
        self, records: list[InvocationRecord], parents: list[int], root: int, naming: Naming
    ) -> None:
        self._records = records
        self.naming = naming
        self._children = children_lists(held_under(parents, root))

    def children(self, node: int) -> Sequence[int]:
        return self._children[node]

    def own_lines(self, node: int) -> int:
        return 2 if self._children[node] else 1

    def priority(self, node: int) -> int:
        return priority_of(duration(self._records[node]))

    def fold(self, left_out: list[int]) -> Fold:
        records, names, children = self._records, self.naming.names, self._children
        beneath = 0
        level = left_out
        while level:  # the calls under them, a level at a time
            level = [child for position in level for child in children[position]]
            beneath += len(level)
        return make_fold(
            [names[records[i].puid][records[i].method] for i in left_out],
            [duration(records[i]) for i in left_out],
            beneath,
        )

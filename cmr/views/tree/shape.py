"""The shape of a big tree, read without a node per call: who holds whom, from records or columns.

``bigtree`` (``cmr show``) and ``bigprofile`` (``cmr profile``) walk a million-call tree by
position. ``tree_shape`` gives them what they walk: each position's caller as the tree hangs it,
its callees, the calls beneath a set of positions, a call's duration, and where a (puid, iid)
sits. From a list of records (the pure-Python store path) it is made with comprehensions
(``records``); from ``RecordColumns`` (the C accelerator's) with the columns' own index and two
arrays (callees as compressed sparse rows), so a million calls cost a few arrays, not a million
lists.

Only the common case has a shape: every (puid, iid) once, a true root, records in start order,
every caller before its callees (so no cycle). Otherwise ``tree_shape`` returns None and the
caller builds the whole tree, whose rules cover every case.
"""

from __future__ import annotations

import contextlib
import operator
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from cmr.store.base import HandoffRecord, InvocationRecord
from cmr.store.column_passes import children, hang, shape_rows, subtree_sizes, take, total_at
from cmr.store.columns import RecordColumns, distinct_values
from cmr.views.tree.records import (
    Links,
    Naming,
    children_lists,
    duration,
    held_under,
    index_records,
    link,
    linked,
    start_ordered,
)


@dataclass(frozen=True, slots=True)
class Shape:
    links: Links
    held: Sequence[int]  # each position's caller as the tree hangs it (the root's: -1)
    processes: int
    locate: Callable[[int, int], int]  # the position of (puid, iid); -1: not here
    callees: Callable[[int], Sequence[int]]  # a position's callees, in start order
    beneath: Callable[[Sequence[int]], int]  # the calls below the given positions
    duration: Callable[[int], int | None]  # a position's duration (None: not ended)

    @property
    def root(self) -> int:
        root = self.links.root_index
        assert root is not None
        return root


def tree_shape(
    records: Sequence[InvocationRecord], handoffs: dict[int, HandoffRecord]
) -> Shape | None:
    """The tree's shape, or None when it is not the common case (module docstring)."""
    if isinstance(records, RecordColumns):
        return _columns_shape(records, handoffs)
    count = len(records)
    index = index_records(records)
    if sum(len(iids) for iids in index.values()) < count:
        return None
    links = link(records, index, handoffs)
    root = links.root_index
    if root is None or not _ordered(links, start_ordered(records)):
        return None
    held = held_under(list(links.parents), root)
    lists = children_lists(held)

    def beneath(positions: Sequence[int]) -> int:
        below = 0
        level = positions
        while level:  # a level at a time
            level = [child for position in level for child in lists[position]]
            below += len(level)
        return below

    return Shape(
        links,
        held,
        len(index),
        lambda puid, iid: index.get(puid, {}).get(iid, -1),
        lists.__getitem__,
        beneath,
        lambda position: duration(records[position]),
    )


def _ordered(links: Links, start_ordered: bool) -> bool:
    parents = links.parents
    return start_ordered and all(map(operator.lt, parents, range(len(parents))))


def _columns_shape(records: RecordColumns, handoffs: dict[int, HandoffRecord]) -> Shape | None:
    parents = records.parent_rows()
    handed, roots, ordered = shape_rows(records, parents)
    links = linked(
        records, parents, locate=records.position, handed=handed, roots=roots, handoffs=handoffs
    )
    root = links.root_index
    held = hang(parents, root) if root is not None and ordered else None
    if held is None:
        return None
    first, callees = children(held)
    sizes = subtree_sizes(held)
    starts, ends, ended = records.start_ns, records.end_ns, records.ended

    def spent(position: int) -> int | None:
        if not ended[position]:
            return None
        return max(0, ends[position] - starts[position])

    return Shape(
        links,
        held,
        len(distinct_values(records, "puid")),
        records.position,
        lambda position: callees[first[position] : first[position + 1]],
        lambda positions: total_at(sizes, _rows(positions)),
        spent,
    )


def row_names(records: RecordColumns, naming: Naming) -> tuple[array[int], list[str]]:
    """Each row's name as an id (one per distinct name, whatever process or method gives it),
    and the names by id."""
    names = naming.names
    name_ids: dict[str, int] = {}
    id_of = {
        (puid, method): name_ids.setdefault(name, len(name_ids))
        for puid, by_method in names.items()
        for method, name in by_method.items()
    }
    if len(names) == 1:
        [puid] = names
        by_method = {method: id_of[puid, method] for method in names[puid]}
        found = _looked_up(by_method, records.method)
    else:
        found = array("q", map(id_of.__getitem__, zip(records.puid, records.method, strict=True)))
    return found, list(name_ids)


def _rows(positions: Sequence[int]) -> array[int]:
    return positions if isinstance(positions, array) else array("q", positions)


#: Method ids below this are looked up in an array (every real one: a process numbers its
#: methods from 1); larger ones through the dict.
_FEW_IDS: Final = 1 << 20


def _looked_up(ids: dict[int, int], keys: array[int]) -> array[int]:
    """``ids[key]`` for each of ``keys`` (every key is one of ``ids``: they are the records'
    own methods), through an array in C when they are small."""
    top = max(ids, default=0)
    if min(ids, default=0) >= 0 and top < _FEW_IDS:
        table = array("q", [-1]) * (top + 1)
        for key, value in ids.items():
            table[key] = value
        with contextlib.suppress(ValueError):  # a key beyond the table: the dict says which
            return take(table, keys)
    return array("q", map(ids.__getitem__, keys))

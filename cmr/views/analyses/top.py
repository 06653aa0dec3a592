"""``cmr top``: many sequences summed up, one row per root (or per traced method).

Per root, from the sequences' listing lines (nothing else is read): how many, how many of them
raised at the root, and the 50th, 90th and 99th percentile and the maximum of their durations.
Per method, from the sequences' call trees: how many calls, how many raised, the same
percentiles of their durations, and the total of their self time. Percentiles are nearest-rank
(the smallest duration with at least that share of the others at or below it) over the calls
that ended; a row whose calls have not ended has none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cmr.store.base import SequenceQuery, SequenceSummary, Store
from cmr.store.listing import duration_of
from cmr.views.model import KIND_MEASURED, SequenceTree, walk
from cmr.views.pipeline import view_sequence
from cmr.views.render.terms import format_duration


def percentile(durations: Sequence[int], share: float) -> int | None:
    """The nearest-rank percentile (``share`` in (0, 1]) of ``durations``: the smallest with at
    least that share of them at or below it; None when there are none. ``cmr top``, ``cmr map``
    and the histogram of ``cmr ui`` all use it, so their figures agree."""
    if not durations:
        return None
    ordered = sorted(durations)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclass(slots=True)
class TopRow:
    name: str
    count: int = 0
    errors: int = 0
    durations: list[int] = field(default_factory=list)
    self_ns: int | None = None  # per method only: the calls' self time, added up

    def percentile(self, share: float) -> int | None:
        """The nearest-rank percentile (``share`` in (0, 1]) of the durations, or None."""
        return percentile(self.durations, share)

    @property
    def max_ns(self) -> int | None:
        return max(self.durations, default=None)


def by_root(lines: Iterable[SequenceSummary]) -> list[TopRow]:
    """One row per root name, the slowest (p99) first."""
    rows: dict[str, TopRow] = {}
    for line in lines:
        row = rows.get(line.root)
        if row is None:
            row = rows[line.root] = TopRow(line.root)
        row.count += 1
        row.errors += line.error is not None
        duration = duration_of(line)
        if duration is not None:
            row.durations.append(duration)
    return _ordered(rows)


def by_method(trees: Iterable[SequenceTree]) -> list[TopRow]:
    """One row per traced method (the calls the tracer timed), the slowest (p99) first."""
    rows: dict[str, TopRow] = {}
    for tree in trees:
        for node, _depth in walk(tree.root):
            if node.kind != KIND_MEASURED:
                continue
            row = rows.get(node.name)
            if row is None:
                row = rows[node.name] = TopRow(node.name, self_ns=0)
            row.count += 1
            row.errors += node.error is not None
            if node.duration_ns is not None:
                row.durations.append(node.duration_ns)
            row.self_ns = (row.self_ns or 0) + (node.self_ns or 0)
    return _ordered(rows)


def _ordered(rows: dict[str, TopRow]) -> list[TopRow]:
    return sorted(rows.values(), key=lambda row: (-(row.percentile(0.99) or -1), row.name))


def summed_up(store: Store, query: SequenceQuery, by: str, limit: int) -> list[TopRow]:
    """The rows of the newest ``limit`` sequences ``query`` selects, per root (``by`` "root":
    their listing lines) or per method ("method": their call trees)."""
    lines = store.list_sequences(limit, query)
    if by == "method":
        return by_method(view_sequence(store, line.seq, None, 0) for line in lines)
    return by_root(lines)


def row_cells(row: TopRow, *, with_self: bool) -> list[str]:
    """A row's cells as ``cmr top`` and ``cmr ui`` show them: count, errors, p50, p90, p99,
    max (and self), times human-readable, "-" where there is none."""
    times = [row.percentile(0.5), row.percentile(0.9), row.percentile(0.99), row.max_ns]
    if with_self:
        times.append(row.self_ns)
    return [
        f"{row.count:,}",
        f"{row.errors:,}",
        *("-" if t is None else format_duration(t) for t in times),
    ]

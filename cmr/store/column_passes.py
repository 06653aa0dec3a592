"""The C passes over a sequence's columns (``cmr.store._columns``): a tree's callees and
subtree sizes, its profile lines, spans, windows, folds and rankings, each one call into C over
``RecordColumns``' arrays. Every function here needs the accelerator (``columns_available``)."""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence
from typing import Final

from cmr.store.accel import accelerator
from cmr.store.columns import RecordColumns, process_pairs

_accel: Final = accelerator


def subtree_sizes(held: array[int]) -> array[int]:
    """Per row, the calls beneath it (``held``: each row's caller, which comes before it). Needs
    the accelerator."""
    assert _accel is not None
    sizes: array[int] = _accel.subtree_sizes(held)
    return sizes


def profile_lines(
    records: RecordColumns, held: Sequence[int], names: array[int], ranks: array[int]
) -> tuple[array[int], ...]:
    """A start-ordered tree's profile lines (a line per distinct path of names from the root,
    row 0; ``held``: each row's caller, ``names``: each row's name id): each line's parent
    line, name id, calls, time and self time, in order of first appearance; then the lines but
    the root by parent, longest first, then by ``ranks[name]`` (the order
    ``profile.sort_profile`` gives a line's children); then each row's line. Needs the
    accelerator."""
    assert _accel is not None
    found = _accel.profile_lines(
        held, records.start_ns, records.end_ns, records.ended, names, ranks
    )
    return tuple(array("q", column) for column in found)


def thread_windows(records: RecordColumns) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Per thread (puid, tid), the union of its rows' windows as sorted disjoint windows (a
    window: ``[start, max(end, start + 1))``, unending when not ended), from one C pass per
    thread. Needs the accelerator."""
    assert _accel is not None
    (threads,) = process_pairs(records, "tid")
    args = (records.start_ns, records.end_ns, records.ended)
    if len(threads) == 1:
        return {thread: _accel.windows(None, *args) for thread in threads}
    pairs = list(zip(records.puid, records.tid, strict=True))
    found: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for thread in threads:
        rows = array("q", itertools.compress(range(len(pairs)), map(thread.__eq__, pairs)))
        found[thread] = _accel.windows(rows, *args)
    return found


def nested(records: RecordColumns, held: array[int]) -> bool:
    """Whether, with ``held`` each row's caller (every caller before its callees), each row's
    window lies within its caller's and after its previous sibling's: the calls open at any
    instant are then one chain. A window is ``[start, max(end, start + 1))``, unending when the
    row has not ended (``timeline.Call``'s). Needs the accelerator."""
    assert _accel is not None
    found: bool = _accel.nested(held, records.start_ns, records.end_ns, records.ended)
    return found


def spans(records: RecordColumns) -> array[int]:
    """Each row's duration (at least 0), or 2**63 for a row not ended: what the line budget
    ranks calls by (``budget.priority_of``), as an unsigned array. Needs the accelerator."""
    assert _accel is not None
    found: array[int] = _accel.spans(records.start_ns, records.end_ns, records.ended)
    return found


def line_totals(
    held: array[int], line_of: array[int], own: dict[int, tuple[int, int]], lines: int
) -> tuple[array[int], array[int], bytes]:
    """Sample weights and CPU times summed up the callers as ``merge._total`` sums them (``own``:
    row -> the weight and CPU time it holds itself; ``held``: each row's caller), then per line
    (``line_of``: each row's line, of ``lines``): the weights, the CPU times where the weight
    is not 0, and whether there was one. Needs the accelerator."""
    assert _accel is not None
    rows = array("q", own)
    weights = array("q", [weight for weight, _cpu in own.values()])
    cpus = array("q", [cpu for _weight, cpu in own.values()])
    samples, cpu, sampled = _accel.line_totals(held, line_of, rows, weights, cpus, lines)
    return array("q", samples), array("q", cpu), sampled


def ranked(rows: array[int], priorities: array[int], limit: int) -> list[int]:
    """Positions in ``rows`` of the (at most ``limit``) highest ``priorities[row]`` (unsigned),
    highest first, ties in order: ``budget.rank`` in C. Needs the accelerator."""
    assert _accel is not None
    return array("q", _accel.ranked(rows, priorities, limit)).tolist()


def covered(records: RecordColumns, rows: array[int], start: int, end: int) -> int:
    """How much of the window ``[start, end)`` the union of the windows of ``rows`` (in start
    order) covers, each clipped to it, one not ended counting until ``end`` (as
    ``calltree.covered_in_order``). Needs the accelerator."""
    assert _accel is not None
    found: int = _accel.covered(rows, records.start_ns, records.end_ns, records.ended, start, end)
    return found


def take(values: array[int], rows: array[int]) -> array[int]:
    """``values[row]`` for each of ``rows``, in their order (ValueError: a row out of range).
    Needs the accelerator."""
    assert _accel is not None
    found: array[int] = _accel.take(values, rows)
    return found


def total_at(values: array[int], rows: array[int]) -> int:
    """The sum of ``values`` at ``rows``. Needs the accelerator."""
    assert _accel is not None
    total: int = _accel.total_at(values, rows)
    return total


def fold_sums(
    records: RecordColumns, rows: array[int], names: array[int]
) -> tuple[dict[int, tuple[int, int]], int, int]:
    """Of ``rows`` (``names``: each row's name id): per name id the calls and the ended ones'
    time, how many have not ended, and the ended ones' time in all (a duration at least 0).
    Needs the accelerator."""
    assert _accel is not None
    sums: tuple[dict[int, tuple[int, int]], int, int] = _accel.fold_sums(
        rows, names, records.start_ns, records.end_ns, records.ended
    )
    return sums


def shape_rows(records: RecordColumns, parents: array[int]) -> tuple[list[int], list[int], bool]:
    """The rows that continue a hand-off, the rows with neither a parent nor a hand-off, and
    whether the rows' starts increase strictly (``parents``: each row's parent row, for their
    number). Needs the accelerator."""
    assert _accel is not None
    handed, roots, ordered = _accel.shape_rows(
        parents, records.parent, records.hid, records.start_ns
    )
    return array("q", handed).tolist(), array("q", roots).tolist(), ordered


def hang(parents: array[int], root: int) -> array[int] | None:
    """Each row's caller as the tree hangs it (``parents``: each row's parent row, -1: none
    here, then it hangs under ``root``; the root under none, -1), or None when a parent comes
    after its row. Needs the accelerator."""
    assert _accel is not None
    held: array[int] | None = _accel.hang(parents, root)
    return held


def children(held: array[int]) -> tuple[array[int], array[int]]:
    """The rows each row holds (``held``: each row's caller, -1 for none), in row order: row r's
    are ``rows[starts[r]:starts[r + 1]]``. Needs the accelerator."""
    assert _accel is not None
    found: tuple[array[int], array[int]] = _accel.children(held)
    return found

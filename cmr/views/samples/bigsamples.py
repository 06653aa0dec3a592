"""Samples merged into the profile of a big sequence, with a node only for the calls they need.

``merge_samples`` places each sample on the calls of its thread that hold its instant, and cuts
its span where a callee starts; it needs no other call. In a sequence of one thread whose calls
nest (``column_passes.nested``: the calls open at any instant are one chain), those are few: the
chain holding a tick's instant (found by bisection on the start column, then up the callers), the
first callee starting after it, and, for a collapsed sample, every call that meets its span.
``graft_samples`` makes a tree of those calls and their callers only, gives each its self time
from the columns (its free time on the thread, which ``merge_samples`` scales estimates into),
merges the samples into it, and adds what they brought to the profile lines of ``bigprofile``:
sample counts and CPU time up the callers, the self time the estimated frames took, and the
estimated frames themselves, folded under their call's line. The profile is the one the whole
tree gives (the tests compare them, as text and as JSON).

Anything else (several threads, calls that interleave, records as a list) returns None and the
caller merges the samples into the whole tree.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from array import array

import msgspec

from cmr.store.base import InvocationRecord, SampleRecord, SequenceData
from cmr.store.column_passes import covered, line_totals, nested
from cmr.store.columns import RecordColumns, distinct_values
from cmr.views.analyses.profile import Grafts, ProfileNode
from cmr.views.model import KIND_MEASURED, walk
from cmr.views.samples.merge import merge_samples
from cmr.views.samples.timeline import OPEN
from cmr.views.tree.calltree import build_tree
from cmr.views.tree.shape import Shape


def graftable(data: SequenceData, shape: Shape) -> bool:
    """Whether ``graft_samples`` takes this sequence (module docstring)."""
    records = data.invocations
    if not isinstance(records, RecordColumns) or len(distinct_values(records, "tid")) != 1:
        return False
    return len(distinct_values(records, "puid")) == 1 and nested(records, array("q", shape.held))


def graft_samples(
    data: SequenceData,
    shape: Shape,
    lines: list[ProfileNode],
    line_of: array[int],
    *,
    by_line: bool = False,
) -> int:
    """Merge ``data``'s samples into ``lines`` (each row's line: ``line_of``), as
    ``merge_samples`` would into the whole tree (``by_line``: its ``lines``); returns the
    sample weight skipped. Only where ``graftable``."""
    records = data.invocations
    assert isinstance(records, RecordColumns)
    rows = _needed(data, records, shape)
    row_of = {records.iid[row]: row for row in rows}
    merged = merge_samples(
        build_tree(part := _part(data, records, shape, rows)),
        part,
        lines=by_line,
        free_ns=lambda node: _self_ns(records, shape, row_of[node.iid]),
    )
    own: dict[int, tuple[int, int]] = {}  # row -> the sample weight and CPU time it holds itself
    grafts = Grafts()
    for node, _depth in walk(merged.root):
        if node.kind != KIND_MEASURED:
            continue
        row = row_of[node.iid]
        measured = [child for child in node.children if child.kind == KIND_MEASURED]
        own[row] = (
            node.samples - sum(child.samples for child in measured),
            (node.cpu_ns or 0) - sum(child.cpu_ns or 0 for child in measured),
        )
        line = lines[line_of[row]]
        line.self_samples += node.self_samples
        estimated = [child for child in node.children if child.kind != KIND_MEASURED]
        if not estimated:
            continue
        # Its self time less its estimated frames' (calls that nest interleave no task, so
        # every one of them took its time from the call's own, ``merge._grow``).
        before = _self_ns(records, shape, row)
        if before is not None:
            taken = sum(child.duration_ns or 0 for child in estimated)
            line.self_ns += max(0, before - taken) - before
        grafts.add(line, estimated)
    _add_totals(own, array("q", shape.held), lines, line_of)
    grafts.sort()
    return merged.samples_skipped


def _part(
    data: SequenceData, records: RecordColumns, shape: Shape, rows: list[int]
) -> SequenceData:
    """``data`` with only ``rows``, each under its nearest caller among them: a call's callers
    between the two are left out (what it is placed by is its own frame, module docstring)."""
    kept = set(rows)
    held, iids = shape.held, records.iid
    part: list[InvocationRecord] = []
    for row in rows:
        caller = held[row]
        while caller >= 0 and caller not in kept:
            caller = held[caller]
        record = records.record(row)
        part.append(
            msgspec.structs.replace(record, parent=iids[caller] if caller >= 0 else 0, hid=0)
        )
    return dataclasses.replace(data, invocations=part)


def _add_totals(
    own: dict[int, tuple[int, int]], held: array[int], lines: list[ProfileNode], line_of: array[int]
) -> None:
    """Sample counts and CPU times up every caller's line, as ``merge._total`` sums them up the
    whole tree: a call's CPU time counts, for itself and its callers, only where samples fell
    (``column_passes.line_totals``; ``own``: row -> the weight and CPU time it holds itself)."""
    samples, cpu, sampled = line_totals(held, line_of, own, len(lines))
    for at in itertools.compress(range(len(lines)), sampled):
        line = lines[at]
        line.samples += samples[at]
        line.cpu_ns = (line.cpu_ns or 0) + cpu[at]


def _self_ns(records: RecordColumns, shape: Shape, row: int) -> int | None:
    """A row's self time: its duration less what its callees cover (None: not ended)."""
    if not records.ended[row]:
        return None
    start, end = records.start_ns[row], records.end_ns[row]
    callees = shape.callees(row)
    spent = max(0, end - start)
    if not len(callees):
        return spent
    return max(0, spent - covered(records, array("q", callees), start, end))


def _needed(data: SequenceData, records: RecordColumns, shape: Shape) -> list[int]:
    """The rows ``merge_samples`` reads to place ``data``'s samples (module docstring), in row
    order; with its callers, each innermost call whose own frame the stack does not show (it is
    then placed by theirs), and every call a collapsed sample's span meets."""
    starts, ends, ended, held = records.start_ns, records.end_ns, records.ended, shape.held
    thread = (records.puid[0], records.tid[0]) if len(records) else None

    def holding(t: int) -> int:
        """The innermost row holding ``t`` (-1: none)."""
        row = bisect.bisect_right(starts, t) - 1
        while row >= 0 and (ended[row] and max(ends[row], starts[row] + 1) <= t):
            row = held[row]
        return row

    wanted: set[int] = {0} if len(records) else set()
    chained: list[int] = []  # rows whose callers are wanted too
    for sample in data.samples:
        if (sample.puid, sample.tid) != thread:
            continue
        t, duration = sample.t_ns, sample.duration_ns
        innermost = holding(t)
        if innermost >= 0:
            wanted.add(innermost)
            callees = shape.callees(innermost)
            after = bisect.bisect_right(callees, t, key=starts.__getitem__)
            if after < len(callees):
                wanted.add(callees[after])
        if sample.weight > 1 and duration > 0:  # every call that meets its span
            stop = min(t + duration, OPEN)
            span = range(bisect.bisect_left(starts, t), bisect.bisect_left(starts, stop))
            wanted.update(span)
            chained += span
            chained.append(innermost)
        elif innermost >= 0 and _key(data, records, innermost) not in _keys(data, sample):
            chained.append(innermost)
    complete: set[int] = set()  # rows whose every caller is wanted
    for found in chained:
        caller = held[found] if found >= 0 else -1
        while caller >= 0 and caller not in complete:
            wanted.add(caller)
            complete.add(caller)
            caller = held[caller]
    return sorted(wanted)


def _key(data: SequenceData, records: RecordColumns, row: int) -> tuple[str, int] | None:
    """How a row's own frame shows on a stack: its method's (file, first line)."""
    method = data.methods.get((records.puid[row], records.method[row]))
    return (method.file, method.line) if method is not None and method.file else None


def _keys(data: SequenceData, sample: SampleRecord) -> set[tuple[str, int] | None]:
    """The (file, first line) of each frame on a sample's stack."""
    known, puid = data.frames.get, sample.puid
    found = map(known, [(puid, frame) for frame in sample.frames])
    return {(frame.file, frame.line) for frame in found if frame is not None}

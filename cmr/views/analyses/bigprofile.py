"""The profile of one sequence, read straight from its records: no call tree in between.

``profile_sequence(build_tree(data))`` makes a node of every call and then folds them into lines;
for a million calls both halves cost seconds. Without samples to merge, a line is just the path of
names from the root: ``sequence_profile`` walks the records in start order (every parent comes
before its callees), gives each record the line of its caller's line and its own name, and adds
up per line the calls, their time and their self time. The result is the same ``Profile``, line
for line (the tests compare them, as text and as JSON).

It takes the case ``bigtree`` takes (records in start order, every parent before its child, a
true root that comes first, no duplicate); with samples, only from columns and where
``bigsamples`` can graft them onto the lines (one thread, nested calls). Anything else returns
None and the caller folds the whole tree.
"""

from __future__ import annotations

import collections
import operator
from array import array
from collections import Counter
from collections.abc import Sequence

from cmr.gc_paused import paused_gc
from cmr.store.base import InvocationRecord, SequenceData
from cmr.store.column_passes import profile_lines
from cmr.store.columns import RecordColumns, distinct_values
from cmr.views.analyses.profile import Profile, ProfileNode, sort_profile
from cmr.views.model import KIND_MEASURED
from cmr.views.samples.bigsamples import graft_samples, graftable
from cmr.views.tree.calltree import covered_in_order
from cmr.views.tree.records import Naming
from cmr.views.tree.shape import Shape, row_names, tree_shape


def sequence_profile(data: SequenceData, *, lines: bool = False) -> Profile | None:
    """``profile_sequence(merge_samples(build_tree(data), data, lines=lines))`` for the common
    case (module docstring), else None."""
    if not data.invocations or (data.samples and not isinstance(data.invocations, RecordColumns)):
        return None
    with paused_gc():
        return _sequence_profile(data, lines)


def _sequence_profile(data: SequenceData, by_line: bool) -> Profile | None:
    records = data.invocations
    shape = tree_shape(records, data.handoffs)
    if shape is None or shape.root != 0:
        return None
    if data.samples and not graftable(data, shape):
        return None
    naming = Naming(records, sorted(distinct_values(records, "puid")), data)
    skipped = 0
    if isinstance(records, RecordColumns):
        lines, line_of = _column_lines(records, shape, naming)  # sorted as they are made
        if data.samples:
            skipped = graft_samples(data, shape, lines, line_of, by_line=by_line)
        root = lines[0]
    else:
        root = _record_lines(records, shape, naming)
        sort_profile(root)
    return Profile([root], sequences=1, samples_skipped=skipped)


def _record_lines(records: Sequence[InvocationRecord], shape: Shape, naming: Naming) -> ProfileNode:
    """The root's line, from a list of records."""
    count = len(records)
    held = shape.held
    names = naming.names
    by_name = [names[r.puid][r.method] for r in records]

    # Each record's line: its caller's line and its own name.
    lines = [ProfileNode(by_name[0], KIND_MEASURED)]
    line_of = [0] * count
    known: dict[tuple[int, str], int] = {}
    for position in range(1, count):
        key = (line_of[held[position]], by_name[position])
        line = known.get(key)
        if line is None:
            line = known[key] = len(lines)
            lines.append(ProfileNode(key[1], KIND_MEASURED))
            lines[key[0]].children.append(lines[line])
        line_of[position] = line

    children = shape.callees
    spent = [
        None if r.end_ns is None else r.end_ns - r.start_ns if r.end_ns > r.start_ns else 0
        for r in records
    ]  # records.duration of each, inline
    # A call not ended yet counts what its callees account for (the deepest first).
    times: list[int | None] = list(spent)
    for position in reversed([p for p, value in enumerate(spent) if value is None]):
        times[position] = sum([times[child] or 0 for child in children(position)])
    own = [0 if value is None else value for value in spent]  # a callee-less call: all its own
    for position in [p for p in range(count) if children(p) and spent[p] is not None]:
        below = [records[child] for child in children(position)]
        own[position] = max(0, (spent[position] or 0) - covered_in_order(records[position], below))

    time_of, self_of = [0] * len(lines), [0] * len(lines)
    for line, time_ns, self_ns in zip(line_of, times, own, strict=True):
        time_of[line] += time_ns or 0
        self_of[line] += self_ns
    for line, calls in Counter(line_of).items():
        node = lines[line]
        node.calls, node.time_ns, node.self_ns = calls, time_of[line], self_of[line]
    return lines[0]


def _column_lines(
    records: RecordColumns, shape: Shape, naming: Naming
) -> tuple[list[ProfileNode], array[int]]:
    """The lines (the root's first) and each row's line, from columns: the lines and their sums
    come from one C pass (``profile_lines``, the rules of ``_record_lines``); only a line
    becomes an object."""
    named, text = row_names(records, naming)
    ranks = array("q", [0] * len(text))
    for rank, name_id in enumerate(sorted(range(len(text)), key=text.__getitem__)):
        ranks[name_id] = rank
    parent, name, calls, time_ns, self_ns, order, line_of = profile_lines(
        records, shape.held, named, ranks
    )
    lines = [
        ProfileNode(text[n], KIND_MEASURED, calls=c, time_ns=t, self_ns=o)
        for n, c, t, o in zip(name, calls, time_ns, self_ns, strict=True)
    ]
    children = list(map(operator.attrgetter("children"), lines))
    collections.deque(  # each line's children appended longest first: no sort left to do
        map(
            list.append,
            map(children.__getitem__, map(parent.__getitem__, order)),
            map(lines.__getitem__, order),
        ),
        maxlen=0,
    )
    return lines, line_of

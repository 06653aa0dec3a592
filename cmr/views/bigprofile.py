"""The profile of one sequence, read straight from its records: no call tree in between.

``profile_sequence(build_tree(data))`` makes a node of every call and then folds them into lines;
for a million calls both halves cost seconds. Without samples to merge, a line is just the path of
names from the root: ``sequence_profile`` walks the records in start order (every parent comes
before its callees), gives each record the line of its caller's line and its own name, and adds
up per line the calls, their time and their self time. The result is the same ``Profile``, line
for line (the tests compare them, as text and as JSON).

It takes the case ``bigtree`` takes (records in start order, every parent before its child, a
true root that comes first, no duplicate) and only without samples; anything else returns None and
the caller folds the whole tree.
"""

from __future__ import annotations

import operator
from collections import Counter

from cmr.store.base import SequenceData
from cmr.views._gc import paused_gc
from cmr.views.calltree import covered_in_order
from cmr.views.model import KIND_MEASURED, KIND_SYNTHETIC
from cmr.views.profile import Profile, ProfileNode, sort_profile
from cmr.views.records import (
    Naming,
    children_lists,
    held_under,
    index_records,
    link,
    start_ordered,
)


def sequence_profile(data: SequenceData) -> Profile | None:
    """``profile_sequence(build_tree(data))`` for the common case without samples, else None."""
    if data.samples or not data.invocations:
        return None
    with paused_gc():
        return _sequence_profile(data)


def _sequence_profile(data: SequenceData) -> Profile | None:
    records = data.invocations
    count = len(records)
    index = index_records(records)
    if sum(len(iids) for iids in index.values()) < count:
        return None
    links = link(records, index, data.handoffs)
    if links.root_index != 0 or not start_ordered(records):
        return None
    held = held_under(links.parents, 0)
    if not all(map(operator.lt, held, range(count))):
        return None
    naming = Naming(records, index, data)
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

    children = children_lists(held)
    spent = [
        None if r.end_ns is None else r.end_ns - r.start_ns if r.end_ns > r.start_ns else 0
        for r in records
    ]  # records.duration of each, inline
    # A call not ended yet counts what its callees account for (the deepest first).
    times: list[int | None] = list(spent)
    for position in reversed([p for p, value in enumerate(spent) if value is None]):
        times[position] = sum([times[child] or 0 for child in children[position]])
    own = [0 if value is None else value for value in spent]  # a callee-less call: all its own
    for position in [p for p in range(count) if children[p] and spent[p] is not None]:
        below = [records[child] for child in children[position]]
        own[position] = max(0, (spent[position] or 0) - covered_in_order(records[position], below))

    time_of, self_of = [0] * len(lines), [0] * len(lines)
    for line, time_ns, self_ns in zip(line_of, times, own, strict=True):
        time_of[line] += time_ns or 0
        self_of[line] += self_ns
    for line, calls in Counter(line_of).items():
        node = lines[line]
        node.calls, node.time_ns, node.self_ns = calls, time_of[line], self_of[line]
    top = ProfileNode("", KIND_SYNTHETIC, children=[lines[0]])
    for root in top.children:
        sort_profile(root)
    return Profile(top.children, sequences=1, samples_skipped=0)

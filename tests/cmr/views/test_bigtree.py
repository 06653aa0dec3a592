"""A big tree built only as far as it is shown (``cmr.views.tree.bigtree``) prints exactly what the
whole tree prints within the same line budget, a profile read straight from the records
(``cmr.views.analyses.bigprofile``) is the one the whole tree gives, and both leave the cases they
do not take to the whole tree."""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable

import msgspec
import pytest

from cmr.store import open_store
from cmr.store.base import SequenceData
from cmr.store.column_passes import covered, fold_sums, spans
from cmr.store.columns import RecordColumns, columns_available, unpack_columns
from cmr.store.stored_batches import encode_chunks
from cmr.views.analyses.bigprofile import sequence_profile
from cmr.views.analyses.profile import profile_sequence
from cmr.views.pipeline import render_sequence
from cmr.views.render.json import profile_to_json
from cmr.views.render.profile_text import render_profile
from cmr.views.render.text import render_text
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.bigtree import _longest, longer_tree, name_ranks, shown_tree
from cmr.views.tree.budget import make_fold
from cmr.views.tree.calltree import build_tree, covered_in_order
from cmr.views.tree.processors import drop_shorter_than
from cmr.views.tree.records import Naming, duration
from cmr.views.tree.shape import row_names, tree_shape
from invoseq import wire
from tests.cmr.views.conftest import PUID, SequenceBuilder

OTHER = 0x2222
US = 1_000


def in_start_order(data: SequenceData) -> SequenceData:
    """As a store returns them."""
    ordered = sorted(data.invocations, key=lambda r: (r.start_ns, r.puid, r.iid))
    return dataclasses.replace(data, invocations=ordered)


def service() -> SequenceData:
    """A root over 30 steps of 20 calls (one in seven raised, some as long as each other), a
    step handed to a pool thread after a queue wait, a call handed to another process that ended
    with it still open, a call still running, log lines, an orphan of lost events, an entry
    from a foreign system beside the root, and a thread that ends after the root (the last
    three calls of the root are detached)."""
    b = SequenceBuilder()
    b.process(OTHER, pid=5151, host="worker", ended=True)
    b.call("app.main", 1, start=0, end=10_000 * US)
    iid, t = 1, US
    for _step in range(30):
        iid += 1
        step_iid = iid
        b.call("app.step", step_iid, 1, start=t, end=t + 200 * US)
        for call in range(20):
            iid += 1
            length = (call % 4 + 1) * US
            error = "KeyError" if call % 7 == 3 else None
            b.call(f"app.call{call % 5}", iid, step_iid, start=t + US + call * 5 * US,
                   end=t + US + call * 5 * US + length, error=error)  # fmt: skip
        t += 250 * US
    b.handoff(0x10, 1, submitted=t, kind="thread")
    b.call("app.pooled", iid + 1, start=t + 40 * US, end=t + 900 * US, tid=2, hid=0x10)
    b.call("app.pooled_inner", iid + 2, iid + 1, start=t + 50 * US, end=t + 60 * US, tid=2)
    b.handoff(0x20, 1, submitted=t + US, kind="process")
    b.call("app.remote_work", 1, start=t + 70 * US, puid=OTHER, hid=0x20)
    b.call("app.waiting", iid + 3, 1, start=t + 80 * US)
    b.call("app.lost_parent", iid + 4, 999_999, start=t + 90 * US, end=t + 95 * US)
    b.call("app.foreign", iid + 5, start=t + 100 * US, end=t + 120 * US, hid=0x30)
    b.handoff(0x40, 1, submitted=t + 2 * US, kind="thread")  # a writer outliving the root
    b.call("app.writer", iid + 6, start=t + 110 * US, end=12_000 * US, tid=3, hid=0x40)
    data = in_start_order(b.data())
    logged = [r for r in data.invocations if r.iid == 2 and r.puid == PUID]
    records = [
        msgspec.structs.replace(r, attributes={"log.0": "WARNING app: slow step"})
        if r in logged
        else r
        for r in data.invocations
    ]
    return dataclasses.replace(data, invocations=records)


def as_columns(data: SequenceData) -> SequenceData:
    """``data`` with its records as the C reader gives them (``columns.RecordColumns``): each
    process's records as one stored batch, a chunk per thread."""
    by_thread: dict[int, dict[int, list[wire.Event]]] = {}
    for r in data.invocations:
        events = by_thread.setdefault(r.puid, {}).setdefault(r.tid, [])
        events.append(wire.Start(r.iid, r.parent, r.hid, r.method, r.start_ns, data.seq))
        if r.attributes:
            events.append(wire.Attrs(r.iid, r.attributes))
        if r.end_ns is not None:
            end = r.end_ns
            events.append(wire.Error(r.iid, end, r.error) if r.error else wire.End(r.iid, end))
    batches = [
        (puid, 1, 0, encode_chunks([wire.ThreadChunk(tid, e) for tid, e in threads.items()]))
        for puid, threads in sorted(by_thread.items())
    ]
    columns = unpack_columns(data.seq, batches, lambda keys: [], lambda puids: [])
    assert list(columns) == data.invocations  # the same records, as columns
    return dataclasses.replace(data, invocations=columns)


def as_records(data: SequenceData) -> SequenceData:
    return data


#: Both forms a store gives records in: a list (pure Python) and columns (the C reader).
FORMS = [
    pytest.param(as_records, id="records"),
    pytest.param(
        as_columns,
        id="columns",
        marks=pytest.mark.skipif(not columns_available(), reason="no C accelerator"),
    ),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("budget", [3, 8, 30, 120, 600])
@pytest.mark.parametrize("color", [False, True])
def test_the_shown_part_prints_what_the_whole_tree_prints(
    budget: int, color: bool, form: Callable[[SequenceData], SequenceData]
) -> None:
    data = service()
    shown = shown_tree(form(data), budget)
    assert shown is not None
    tree, selection = shown
    assert selection.nodes < len(data.invocations)  # a node only for what is shown
    whole = render_text(build_tree(data), color=color, max_nodes=budget)
    assert render_text(tree, color=color, max_nodes=budget, selection=selection) == whole
    assert tree.status == "complete"  # the root ended: what it left running is detached
    if budget == 600:
        assert whole.count("detached") == 3


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("min_us", [1, 3, 5, 150, 800, 20_000])
@pytest.mark.parametrize("budget", [8, 2000])
def test_the_calls_that_lasted_print_what_the_whole_tree_cut_by_duration_prints(
    min_us: int, budget: int, form: Callable[[SequenceData], SequenceData]
) -> None:
    """``longer_tree``: the end-of-run report's tree (calls under 1 % of the sequence hidden),
    made without a node of the calls it hides, is the whole tree's, cut, line for line, with
    the same counts of what is hidden beneath each call."""
    data = service()
    tree = longer_tree(form(data), min_us * US)
    assert tree is not None
    whole = drop_shorter_than(build_tree(data), min_us * US)
    assert tree.hidden == whole.hidden
    assert render_text(tree, max_nodes=budget) == render_text(whole, max_nodes=budget)
    if min_us == 150:
        assert whole.hidden > 500  # most calls were left out, and counted
    assert longer_tree(dataclasses.replace(data, invocations=data.invocations[::-1]), 1) is None


def test_a_tree_that_fits_or_is_not_the_common_case_is_left_to_the_whole_tree() -> None:
    data = service()
    assert shown_tree(data, len(data.invocations)) is None  # it fits: printed in full
    assert shown_tree(data, 0) is None  # no budget
    no_root = [r for r in data.invocations if r.iid != 1 or r.puid != PUID]
    assert shown_tree(dataclasses.replace(data, invocations=no_root), 8) is None
    twice = [*data.invocations, data.invocations[5]]
    assert shown_tree(dataclasses.replace(data, invocations=twice), 8) is None
    backwards = list(reversed(data.invocations))
    assert shown_tree(dataclasses.replace(data, invocations=backwards), 8) is None


def test_render_sequence_takes_the_shown_part_from_a_store_and_prints_the_same(
    tmp_path, make_batch, clock_offset_ns
) -> None:
    seq = bytes.fromhex("b16b00b5" + "00" * 12)
    events: list[wire.Event] = [wire.Start(1, 0, 0, 1, 0, seq)]
    for n in range(2, 602):
        events += [wire.Start(n, 1, 0, 2 + n % 3, n * 10, seq), wire.End(n, n * 10 + n % 7)]
    events.append(wire.End(1, 10_000))
    store = open_store(str(tmp_path / "cmr.sqlite"))
    try:
        store.ingest(make_batch(PUID, 1, {1: events}), clock_offset_ns)
        whole = render_text(build_tree(store.load_sequence(seq)), max_nodes=50)
        assert render_sequence(store, seq, max_nodes=50) == whole
        assert " of 601 calls hidden to keep within 50 lines" in whole.splitlines()[-1]
        # and the calls that lasted 5 ns or more, as the end-of-run report asks
        cut = drop_shorter_than(build_tree(store.load_sequence(seq)), 5)
        assert render_sequence(store, seq, min_duration_ns=5) == render_text(cut)
        assert cut.hidden == sum(1 for n in range(2, 602) if n % 7 < 5)
    finally:
        store.close()


@pytest.mark.parametrize("form", FORMS)
def test_a_profile_read_from_the_records_is_the_one_the_whole_tree_gives(
    form: Callable[[SequenceData], SequenceData],
) -> None:
    data = service()
    quick = sequence_profile(form(data))
    assert quick is not None
    whole = profile_sequence(merge_samples(build_tree(data), data))
    assert render_profile(quick, "t", max_nodes=0) == render_profile(whole, "t", max_nodes=0)
    assert profile_to_json(quick, seq=data.seq, method=None, since_ns=None, lines=False) == (
        profile_to_json(whole, seq=data.seq, method=None, since_ns=None, lines=False)
    )
    assert len(render_profile(quick, "t", max_nodes=0).splitlines()) > 10  # a real profile


@pytest.mark.parametrize("form", FORMS)
def test_a_profile_with_samples_or_without_a_first_root_is_left_to_the_whole_tree(
    builder: SequenceBuilder, form: Callable[[SequenceData], SequenceData]
) -> None:
    data = service()
    no_root = [r for r in data.invocations if r.iid != 1 or r.puid != PUID]
    assert sequence_profile(form(dataclasses.replace(data, invocations=no_root))) is None
    assert shown_tree(form(dataclasses.replace(data, invocations=no_root)), 8) is None
    builder.call("app.main", 1, start=0, end=100)
    builder.frame(1, "main", line=1)
    builder.sample(10, [1])
    assert sequence_profile(builder.data()) is None


@pytest.mark.skipif(not columns_available(), reason="no C accelerator")
def test_the_column_helpers_sum_what_the_records_give() -> None:
    data = as_columns(service())
    columns = data.invocations
    assert isinstance(columns, RecordColumns)
    records = list(columns)
    shape = tree_shape(columns, data.handoffs)
    assert shape is not None
    naming = Naming(columns, sorted(set(columns.puid)), data)
    named, text = row_names(columns, naming)
    assert [text[n] for n in named] == [naming.names[r.puid][r.method] for r in records]
    durations = [duration(r) for r in records]
    assert list(spans(columns)) == [2**63 if d is None else d for d in durations]
    for row, record in enumerate(records):
        callees = array("q", shape.callees(row))
        if record.end_ns is not None and callees:
            within = [records[c] for c in callees]
            assert covered(columns, callees, record.start_ns, record.end_ns) == (
                covered_in_order(record, within)
            )
            by_name, running, total = fold_sums(columns, callees, named)
            fold = make_fold([text[named[c]] for c in callees], [durations[c] for c in callees], 0)
            assert (running, total) == (fold.running, fold.total_ns)
            repeated = {
                (text[n], calls, spent) for n, (calls, spent) in by_name.items() if calls > 1
            }
            assert set(fold.repeated) <= repeated


@pytest.mark.parametrize("form", FORMS)
def test_a_profile_of_thousands_of_distinct_lines_is_the_one_the_whole_tree_gives(
    builder: SequenceBuilder, form: Callable[[SequenceData], SequenceData]
) -> None:
    builder.call("app.main", 1, start=0, end=100_000)
    for n in range(2_000):  # a line each, and one more beneath each: the line table grows
        builder.call(f"app.step{n}", 2 + 2 * n, 1, start=10 + 40 * n, end=40 + 40 * n)
        builder.call(f"app.leaf{n % 7}", 3 + 2 * n, 2 + 2 * n, start=20 + 40 * n, end=30 + 40 * n)
    data = in_start_order(builder.data())
    quick = sequence_profile(form(data))
    assert quick is not None
    whole = profile_sequence(build_tree(data))
    assert render_profile(quick, "t", max_nodes=0) == render_profile(whole, "t", max_nodes=0)
    assert len(render_profile(quick, "t", max_nodes=0).splitlines()) == 2 + 4_001


def test_a_folds_repeated_names_are_the_longest_then_the_most_called_then_by_name() -> None:
    """The column tree's few longest (``_longest``) are ``make_fold``'s, ties at the cut
    included: four names tie for the third place, and the first by name takes it."""
    text = {1: "delta", 2: "alpha", 3: "charlie", 4: "bravo", 5: "echo", 6: "zulu"}
    sums = [(50, 2, 1), (90, 3, 6), (50, 2, 2), (50, 2, 3), (70, 2, 5), (50, 2, 4)]
    names, durations = [], []
    for spent, calls, key in sums:
        names += [text[key]] * calls
        durations += [spent] + [0] * (calls - 1)
    expected = make_fold(names, durations, 0).repeated
    assert tuple(_longest(list(sums), text, name_ranks(text))) == expected
    assert expected == (("zulu", 3, 90), ("echo", 2, 70), ("alpha", 2, 50))

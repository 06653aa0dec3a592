"""Rebuilding a sequence's call tree from store records, including the messy cases real data has."""

from __future__ import annotations

import random

from cmr.views.model import KIND_MEASURED, KIND_SYNTHETIC, UNKNOWN_ROOT, ProcessRef, ThreadRef, walk
from cmr.views.tree.calltree import build_tree


def test_nested_calls_rebuild_the_stack_with_durations_and_self_time(builder, outline):
    # Seed 002: M1 start, M2 start, M2 end, M3 start, M3 end, M1 end.
    builder.thread(1, "MainThread")
    builder.call("shop.M1", 1, start=1_000, end=10_000)
    builder.call("shop.M2", 2, 1, start=2_000, end=4_000)
    builder.call("shop.M3", 3, 1, start=5_000, end=8_000)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "shop.M1 9000/4000 ok",
        "  shop.M2 2000/2000 ok",
        "  shop.M3 3000/3000 ok",
    ]
    assert tree.status == "complete"
    assert tree.seq == builder.data().seq
    root = tree.root
    assert (root.start_ns, root.end_ns) == (1_000, 10_000)
    assert root.process == ProcessRef(puid=0x1111, pid=4242, host="box")
    assert root.thread == ThreadRef(tid=1, name="MainThread")
    assert root.kind == KIND_MEASURED
    assert root.handoff is None
    assert root.error is None
    assert (tree.invocations, tree.threads, tree.processes) == (3, 1, 1)


def test_children_are_ordered_by_start_then_iid_whatever_the_record_order(builder, outline):
    builder.call("m.late", 4, 1, start=300, end=310)
    builder.call("m.tie_b", 3, 1, start=200, end=210)
    builder.call("m.root", 1, start=100, end=400)
    builder.call("m.tie_a", 2, 1, start=200, end=205)

    assert [line.split()[0] for line in outline(build_tree(builder.data()))] == [
        "m.root",
        "m.tie_a",
        "m.tie_b",
        "m.late",
    ]


def test_a_call_that_raised_is_marked_with_its_exception_type(builder, outline):
    builder.call("shop.checkout", 1, start=0, end=100)
    builder.call("shop.pay", 2, 1, start=10, end=60, error="ValueError")

    tree = build_tree(builder.data())

    assert outline(tree) == ["shop.checkout 100/50 ok", "  shop.pay 50/50 error"]
    assert tree.root.children[0].error == "ValueError"
    assert tree.status == "complete"


def test_open_calls_are_running_while_their_process_lives(builder, outline):
    builder.call("shop.checkout", 1, start=0)
    builder.call("shop.price", 2, 1, start=10, end=30)
    builder.call("shop.pay", 3, 1, start=40)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "shop.checkout -/- running",
        "  shop.price 20/20 ok",
        "  shop.pay -/- running",
    ]
    assert tree.status == "running"
    assert tree.root.end_ns is None


def test_open_calls_of_an_ended_process_are_incomplete(builder, outline):
    builder.process(ended=True)
    builder.call("shop.checkout", 1, start=0, end=100)
    builder.call("shop.pay", 2, 1, start=40)

    tree = build_tree(builder.data())

    # The open child counts until its parent's end: 100 - 40 = 60 of the 100 are not self time.
    assert outline(tree) == ["shop.checkout 100/40 ok", "  shop.pay -/- incomplete"]
    # The root ended: the sequence is complete, the call its process never ended is detached.
    assert (tree.status, tree.root.children[0].detached) == ("complete", True)


def test_open_calls_of_a_lost_process_are_incomplete(builder, outline):
    builder.process(lost=True, last_seen_ns=5_000)
    builder.call("shop.checkout", 1, start=0)
    builder.call("shop.pay", 2, 1, start=40, end=90)

    tree = build_tree(builder.data())

    assert outline(tree) == ["shop.checkout -/- incomplete", "  shop.pay 50/50 ok"]
    assert tree.status == "incomplete"
    # The node knows why, for the renderers to say so.
    assert (tree.root.process.state, tree.root.process.last_seen_ns) == ("lost", 5_000)


def test_running_wins_over_incomplete_for_the_sequence_status(builder):
    builder.process(0x2, ended=True)
    builder.call("a.root", 1, start=0)
    builder.call("b.worker", 1, start=5, puid=0x2, hid=7)

    tree = build_tree(builder.data())

    assert [node.status for node, _ in walk(tree.root)] == ["running", "incomplete"]
    assert tree.status == "running"


def test_orphans_whose_parent_was_lost_hang_under_the_root(builder, outline):
    builder.call("m.root", 1, start=0, end=100)
    builder.call("m.child", 2, 1, start=10, end=20)
    builder.call("m.orphan", 5, 4, start=30, end=40)  # parent 4 never arrived
    builder.call("m.orphan_child", 6, 5, start=31, end=35)
    builder.call("m.continued", 1, start=50, end=60, puid=0x2, hid=99)  # a hand-off, not joined

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "m.root 100/70 ok",
        "  m.child 10/10 ok",
        "  m.orphan 10/6 ok",
        "    m.orphan_child 4/4 ok",
        "  m.continued 10/10 ok",
    ]
    assert tree.root.children[2].process.puid == 0x2
    assert (tree.invocations, tree.processes) == (5, 2)


def test_later_roots_hang_under_the_earliest_root(builder, outline):
    builder.call("m.second", 7, start=500, end=600)
    builder.call("m.first", 1, start=0, end=1_000)
    builder.call("m.inner", 8, 7, start=510, end=520)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "m.first 1000/900 ok",
        "  m.second 100/90 ok",
        "    m.inner 10/10 ok",
    ]


def test_without_a_root_a_synthetic_root_spans_what_is_left(builder, outline):
    builder.process(ended=True)
    builder.call("m.a", 5, 4, start=100, end=200)
    builder.call("m.b", 6, 4, start=150, end=400)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        f"{UNKNOWN_ROOT} 300/0 incomplete",
        "  m.a 100/100 ok",
        "  m.b 250/250 ok",
    ]
    assert tree.root.kind == KIND_SYNTHETIC
    assert (tree.root.start_ns, tree.root.end_ns) == (100, 400)
    # The sequence follows the call a listing names (m.a, the earliest), which ended.
    assert tree.status == "complete"
    assert tree.invocations == 2


def test_a_synthetic_root_over_running_calls_is_running(builder, outline):
    builder.call("m.a", 5, 4, start=100)

    tree = build_tree(builder.data())

    assert outline(tree) == [f"{UNKNOWN_ROOT} -/- running", "  m.a -/- running"]
    assert tree.status == "running"


def test_no_invocations_at_all_still_gives_a_tree(builder):
    tree = build_tree(builder.data())

    assert tree.root.name == UNKNOWN_ROOT
    assert tree.root.children == []
    assert tree.status == "incomplete"
    assert tree.invocations == 0


def test_missing_metadata_gets_placeholders_not_errors(builder):
    builder.call("m.root", 1, start=0, end=10, puid=0x9, tid=3, known=False)

    root = build_tree(builder.data()).root

    assert root.name == "<unknown method 1>"
    assert root.thread == ThreadRef(3, "<unknown thread>")
    assert root.process == ProcessRef(0x9, 0, "<unknown host>")
    assert root.status == "running" if root.end_ns is None else root.status == "ok"


def test_a_method_without_module_shows_its_qualname_alone(builder):
    builder.call("main", 1, start=0, end=10)

    assert build_tree(builder.data()).root.name == "main"


def test_duplicate_records_count_once(builder, outline):
    builder.call("m.root", 1, start=0, end=100)
    builder.call("m.child", 2, 1, start=10, end=20)
    builder.call("m.child", 2, 1, start=10, end=20)

    tree = build_tree(builder.data())

    assert outline(tree) == ["m.root 100/90 ok", "  m.child 10/10 ok"]
    assert tree.invocations == 2


def test_parent_cycles_and_self_parents_do_not_hang_or_lose_nodes(builder, outline):
    builder.call("m.root", 1, start=0, end=100)
    builder.call("m.a", 2, 3, start=10, end=20)  # a -> b -> a
    builder.call("m.b", 3, 2, start=12, end=18)
    builder.call("m.c", 4, 5, start=30, end=40)  # c -> d, d -> itself
    builder.call("m.d", 5, 5, start=25, end=45)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "m.root 100/70 ok",
        "  m.a 10/4 ok",
        "    m.b 6/6 ok",
        "  m.d 20/10 ok",
        "    m.c 10/10 ok",
    ]


def test_overlapping_children_never_make_self_time_negative(builder, outline):
    # Children from other threads may overlap: their sum exceeds the parent's duration.
    builder.call("m.root", 1, start=0, end=100)
    builder.call("m.x", 2, 1, start=0, end=90, tid=2)
    builder.call("m.y", 3, 1, start=5, end=95, tid=3)

    assert outline(build_tree(builder.data()))[0] == "m.root 100/5 ok"  # 100 - (0..95)


def test_an_end_before_the_start_counts_as_zero(builder, outline):
    builder.call("m.root", 1, start=100, end=90)

    assert outline(build_tree(builder.data())) == ["m.root 0/0 ok"]


def test_a_chain_ten_thousand_calls_deep_builds(builder):
    depth = 10_000
    for iid in range(1, depth + 1):
        builder.call(f"m.f{iid % 7}", iid, iid - 1, start=iid, end=2 * depth + 10 - iid)

    tree = build_tree(builder.data())

    nodes = list(walk(tree.root))
    assert len(nodes) == depth
    deepest, deepest_depth = nodes[-1]
    assert deepest_depth == depth - 1
    assert deepest.children == []
    assert deepest.duration_ns == deepest.self_ns == 2 * depth + 10 - 2 * depth
    assert tree.root.self_ns == 2  # one ns at each end


def test_a_hundred_thousand_calls_build_into_one_tree(builder):
    rng = random.Random(7)
    count = 100_000
    builder.call("m.root", 1, start=0, end=10 * count)
    for iid in range(2, count + 1):
        parent = rng.randrange(1, iid)
        builder.call(f"m.f{iid % 50}", iid, parent, start=iid, end=iid + 1, tid=iid % 8)
    data = builder.data()
    rng.shuffle(data.invocations)

    tree = build_tree(data)

    assert sum(1 for _ in walk(tree.root)) == count
    assert (tree.invocations, tree.threads, tree.status) == (count, 8, "complete")
    for node, _ in walk(tree.root):
        starts = [child.start_ns for child in node.children]
        assert starts == sorted(starts)

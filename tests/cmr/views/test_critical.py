"""The critical path: the calls that set a sequence's end-to-end time, on sequences whose truth
the test sets (durations, hand-offs and queue waits)."""

from __future__ import annotations

import json

from cmr.views.analyses.critical import CLOCK_SLACK_NS, critical_path, describe_path, path_tree
from cmr.views.render.json import critical_path_to_json, node_fields
from cmr.views.render.text import render_text
from cmr.views.tree.calltree import build_tree

MS = 1_000_000


def names(path):
    return [node.name for node in path]


def test_a_fan_out_s_longest_branch_and_a_task_that_queued_longest_are_the_path(builder):
    builder.call("app.handler", 1, start=0, end=300 * MS)
    # Phase 1: three branches on a pool, the 120 ms one ends last.
    for hid, (tid, start, end) in enumerate([(2, 1, 31), (3, 1, 121), (2, 31, 91)], start=10):
        builder.handoff(hid, 1, submitted=1 * MS, callable_name="app.branch")
        builder.call("app.branch", hid, 1, start=start * MS, end=end * MS, tid=tid, hid=hid)
    builder.call("app.inner", 40, 11, start=20 * MS, end=110 * MS, tid=3)
    # Phase 2: one worker; the quick task queues behind the 100 ms blocker and ends last.
    builder.handoff(20, 1, submitted=125 * MS, callable_name="app.blocker")
    builder.call("app.blocker", 20, 1, start=126 * MS, end=226 * MS, tid=4, hid=20)
    builder.handoff(21, 1, submitted=126 * MS, callable_name="app.quick")
    builder.call("app.quick", 21, 1, start=226 * MS, end=236 * MS, tid=4, hid=21)
    # Phase 3: plain calls in the handler's own thread.
    builder.call("app.save", 30, 1, start=240 * MS, end=250 * MS)
    builder.call("app.render", 31, 1, start=250 * MS, end=290 * MS)

    path = critical_path(build_tree(builder.data()).root)

    assert [(n.name, n.start_ns // MS) for n in path] == [
        ("app.handler", 0),
        ("app.branch", 1),  # the 120 ms branch
        ("app.inner", 20),
        ("app.quick", 226),
        ("app.save", 240),
        ("app.render", 250),
    ]
    quick = path[3]
    assert quick.handoff is not None
    assert quick.handoff.queued_ns == 100 * MS
    assert describe_path(path) == "critical path: 6 calls, 300 ms end to end, 100 ms of it queued"


def test_work_not_waited_for_is_never_on_the_path(builder):
    builder.call("app.handler", 1, start=0, end=100 * MS)
    builder.call("app.step", 2, 1, start=10 * MS, end=60 * MS)
    # Fire and forget: it outlives its caller.
    builder.handoff(9, 1, submitted=70 * MS, callable_name="app.background")
    builder.call("app.background", 3, 1, start=71 * MS, end=500 * MS, tid=2, hid=9)

    assert names(critical_path(build_tree(builder.data()).root)) == ["app.handler", "app.step"]


def test_a_callee_in_another_process_may_end_a_clock_s_slack_after_its_caller(builder):
    builder.call("app.handler", 1, start=0, end=100 * MS)
    builder.handoff(9, 1, submitted=5 * MS, kind="process", callable_name="app.job")
    builder.call("app.job", 2, start=6 * MS, end=100 * MS + CLOCK_SLACK_NS, puid=0x22, hid=9)
    builder.handoff(8, 1, submitted=5 * MS, kind="process", callable_name="app.late")
    builder.call("app.late", 3, start=6 * MS, end=101 * MS + CLOCK_SLACK_NS, puid=0x33, hid=8)

    assert names(critical_path(build_tree(builder.data()).root)) == ["app.handler", "app.job"]


def test_a_running_call_waits_for_its_running_callee(builder):
    builder.call("app.handler", 1, start=0)
    builder.call("app.done", 2, 1, start=1 * MS, end=5 * MS)
    builder.call("app.waiting", 3, 1, start=6 * MS)
    builder.call("app.deep", 4, 3, start=7 * MS)

    path = critical_path(build_tree(builder.data()).root)

    # What it did before it began waiting is on the path too, in time order.
    assert names(path) == ["app.handler", "app.done", "app.waiting", "app.deep"]
    assert describe_path(path) == "critical path: 4 calls, still running end to end"


def test_the_text_shows_the_path_alone_and_counts_the_rest_as_hidden(builder):
    builder.call("app.handler", 1, start=0, end=100 * MS)
    builder.call("app.slow", 2, 1, start=10 * MS, end=90 * MS)
    # Handed off by the handler while the slow call ran, and done long before it ended.
    builder.handoff(9, 1, submitted=11 * MS, callable_name="app.fast")
    builder.call("app.fast", 3, 1, start=12 * MS, end=20 * MS, tid=2, hid=9)
    builder.call("app.under_fast", 4, 3, start=13 * MS, end=19 * MS, tid=2)
    tree = build_tree(builder.data())
    path = critical_path(tree.root)

    shown = path_tree(tree, path)
    text = render_text(shown)

    assert shown.hidden == 2
    assert "app.slow" in text
    assert "app.fast" not in text
    assert "… 2 calls hidden" in text


def test_the_json_lists_the_path_s_calls_with_show_s_node_fields(builder):
    builder.call("app.handler", 1, start=0, end=100 * MS)
    builder.handoff(9, 1, submitted=5 * MS)
    builder.call("app.work", 2, 1, start=40 * MS, end=90 * MS, tid=2, hid=9)
    tree = build_tree(builder.data())
    path = critical_path(tree.root)

    document = json.loads(critical_path_to_json(tree, path))

    assert document["seq"] == tree.seq.hex()
    assert [step["name"] for step in document["path"]] == ["app.handler", "app.work"]
    assert document["path"][1]["handoff"]["queued_ns"] == 35 * MS
    assert set(document["path"][0]) == set(node_fields(tree.root))

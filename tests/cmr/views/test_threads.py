"""`cmr show --threads`: which threads a sequence ran on, how many calls and how busy each was."""

from __future__ import annotations

from cmr.views.model import ProcessRef, ThreadRef
from cmr.views.render.tables import render_thread_activity
from cmr.views.tree.calltree import build_tree
from cmr.views.tree.processors import ThreadActivity, limit_depth, thread_activity

MS = 1_000_000


def test_busy_time_counts_nested_and_overlapping_calls_once(builder):
    builder.thread(1, "MainThread")
    builder.thread(2, "pool-0")
    builder.call("app.main", 1, start=0, end=100)
    builder.call("app.inner", 2, 1, start=10, end=20)  # inside main: adds nothing
    builder.handoff(1, 1, submitted=5)
    builder.call("app.a", 3, 1, start=30, end=60, tid=2, hid=1)
    builder.handoff(2, 1, submitted=5)
    builder.call("app.b", 4, 1, start=50, end=70, tid=2, hid=2)  # overlaps a: 30..70 = 40
    builder.handoff(3, 1, submitted=5)
    builder.call("app.c", 5, 1, start=80, end=90, tid=2, hid=3)  # a gap, then 10 more

    activity = thread_activity(build_tree(builder.data()))

    process = ProcessRef(0x1111, 4242, "box")
    assert activity == [
        ThreadActivity(process, ThreadRef(1, "MainThread"), 2, 100, 0),
        ThreadActivity(process, ThreadRef(2, "pool-0"), 3, 50, 30),
    ]


def test_running_calls_are_busy_up_to_the_latest_time_the_sequence_shows(builder):
    builder.call("app.main", 1, start=0)  # still running
    builder.call("app.waiter", 2, 1, start=10, tid=2)  # still running
    builder.call("app.late", 3, 1, start=40, end=75, tid=3)

    activity = thread_activity(build_tree(builder.data()))

    assert [(a.thread.tid, a.busy_ns, a.first_start_ns) for a in activity] == [
        (1, 75, 0),
        (2, 65, 10),
        (3, 35, 40),
    ]


def test_threads_of_several_processes_are_told_apart_and_ordered_by_first_activity(builder):
    builder.process(0x1, pid=10, host="web")
    builder.process(0x2, pid=20, host="worker")
    builder.call("web.handle", 1, start=100, end=200, puid=0x1)
    builder.handoff(9, 1, submitted=110, kind="process", puid=0x1)
    builder.call("worker.run", 1, start=120, end=150, puid=0x2, hid=9)  # tid 1 again
    builder.call("web.log", 2, 1, start=90, end=95, puid=0x1, tid=3)  # an early stray

    activity = thread_activity(build_tree(builder.data()))

    assert [(a.process.host, a.thread.tid, a.invocations) for a in activity] == [
        ("web", 3, 1),
        ("web", 1, 1),
        ("worker", 1, 1),
    ]


def test_the_whole_tree_counts_even_when_a_view_was_asked_for(builder):
    builder.call("app.main", 1, start=0, end=100)
    builder.call("app.inner", 2, 1, start=10, end=20, tid=2)
    tree = build_tree(builder.data())

    # A pruned tree lacks the hidden calls: the CLI therefore refuses --threads with views.
    assert len(thread_activity(tree)) == 2
    assert len(thread_activity(limit_depth(tree, 0))) == 1


def test_the_threads_table_has_a_line_per_thread_after_the_sequence_header(builder):
    builder.thread(1, "MainThread")
    builder.thread(2, "ThreadPoolExecutor-0_0")
    builder.process(pid=4242, host="box")
    builder.call("shop.checkout", 1, start=0, end=10 * MS)
    builder.handoff(1, 1, submitted=1 * MS)
    builder.call("shop.fetch", 2, 1, start=3_200_000, end=9 * MS, tid=2, hid=1)
    tree = build_tree(builder.data())

    text = render_thread_activity(tree, thread_activity(tree))

    assert text.splitlines() == [
        "0123456789abcdef0123456789abcdef  complete  10.0 ms  2 calls · 2 threads · 1 process",
        "PROCESS   TID  THREAD                  CALLS     BUSY     FIRST",
        "box:4242    1  MainThread                  1  10.0 ms     +0 ns",
        "box:4242    2  ThreadPoolExecutor-0_0      1  5.80 ms  +3.20 ms",
    ]

"""Merging stack samples into a call tree: which node each sample belongs to, where its stack is
cut, how stacks merge by frame and by line, and how their time is counted (collapsed samples,
measured children, a pool's threads, a running call); merging leaves its input alone. Every
expected tree is written by hand."""

from __future__ import annotations

from cmr.views.model import KIND_ESTIMATED, KIND_MEASURED
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import merged

S = 1_000_000_000


def test_stacks_are_cut_below_the_instrumented_frame(builder):
    builder.call("app.handle", 1, start=0, end=1000, line=10)
    builder.frame(1, "main", line=1)
    builder.frame(2, "handle", line=10)
    builder.frame(3, "parse", line=20)
    builder.frame(4, "read", line=5, file="io.py")
    builder.sample(100, [1, 2, 3, 4], duration=100, cpu=100)
    builder.sample(200, [1, 2, 3], duration=100, cpu=50)
    builder.sample(300, [1, 2, 3, 4], duration=100)
    builder.sample(400, [1, 2], duration=100, cpu=100)  # in handle itself

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        "app.handle 1000/700 n=4/1 cpu=250",
        "  ~parse 300/100 n=3/1 cpu=150",
        "    ~read 200/200 n=2/2 cpu=100",
    ]
    parse = tree.root.children[0]
    read = parse.children[0]
    assert (parse.frame, read.frame) == (("app.py", "parse", 20), ("io.py", "read", 5))
    assert (parse.start_ns, parse.end_ns, read.start_ns, read.end_ns) == (100, 400, 100, 400)
    assert (parse.status, parse.kind, tree.root.kind) == ("ok", KIND_ESTIMATED, KIND_MEASURED)
    assert (parse.thread, parse.process) == (tree.root.thread, tree.root.process)
    assert tree.samples_skipped == 0


def test_frames_merge_only_with_the_same_signature_at_the_same_depth(builder):
    builder.call("app.h", 1, start=0, end=1000, line=10)
    builder.frame(2, "h", line=10)
    builder.frame(5, "a", line=50)
    builder.frame(6, "b", line=60)
    builder.frame(7, "c", line=70)
    builder.sample(0, [2, 5, 7], duration=100)
    builder.sample(100, [2, 6, 7], duration=100)
    builder.sample(200, [2, 5, 7], duration=100)
    builder.sample(300, [2, 5, 5], duration=100)  # a calling itself: a deeper a, not the same

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        "app.h 1000/600 n=4/0 cpu=0",
        "  ~a 300/0 n=3/0 cpu=0",
        "    ~c 200/200 n=2/2 cpu=0",
        "    ~a 100/100 n=1/1 cpu=0",
        "  ~b 100/0 n=1/0 cpu=0",
        "    ~c 100/100 n=1/1 cpu=0",
    ]


def test_lines_split_a_frame_by_the_line_it_was_executing(builder):
    builder.call("app.h", 1, start=0, end=1000, line=10)
    builder.frame(2, "h", line=10)
    builder.frame(5, "p", line=50)
    builder.frame(7, "q", line=70)
    builder.sample(0, [2, 5, 7], lines=[12, 51, 71], duration=100)
    builder.sample(100, [2, 5, 7], lines=[12, 53, 71], duration=100)
    builder.sample(200, [2, 5, 7], lines=[14, 51, 71], duration=100)  # h's own line: not cut

    by_function = merge_samples(build_tree(builder.data()), builder.data())
    by_line = merge_samples(build_tree(builder.data()), builder.data(), lines=True)

    assert merged(by_function, frames=True) == [
        "app.h 1000/700 n=3/0 cpu=0",
        "  ~p @50 300/0 n=3/0 cpu=0",
        "    ~q @70 300/300 n=3/3 cpu=0",
    ]
    assert merged(by_line, frames=True) == [
        "app.h 1000/700 n=3/0 cpu=0",
        "  ~p @51 200/0 n=2/0 cpu=0",
        "    ~q @71 200/200 n=2/2 cpu=0",
        "  ~p @53 100/0 n=1/0 cpu=0",
        "    ~q @71 100/100 n=1/1 cpu=0",
    ]


def test_a_collapsed_sample_cut_by_a_window_counts_pro_rata(builder):
    builder.call("app.wait", 1, start=0, end=5 * S, line=10)
    builder.frame(2, "wait", line=10)
    builder.frame(3, "block", line=30)
    builder.sample(0, [2, 3], weight=100, duration=10 * S)  # half of it after the call ended

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        f"app.wait {5 * S}/0 n=50/0 cpu=0",
        f"  ~block {5 * S}/{5 * S} n=50/50 cpu=0",
    ]
    block = tree.root.children[0]
    assert (block.start_ns, block.end_ns) == (0, 5 * S)


def test_a_collapsed_sample_is_shared_between_a_node_and_its_child_by_time(builder):
    builder.call("app.m", 1, start=0, end=10 * S, line=10)
    builder.call("app.c", 2, 1, start=2 * S, end=4 * S, line=30)
    builder.frame(1, "m", line=10)
    builder.frame(9, "idle", line=90)
    # Blocked in m for 10 s; c's frame never shows, so within c it is cut below m's frame.
    builder.sample(0, [1, 9], weight=100, duration=10 * S, cpu=1000)

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        f"app.m {10 * S}/0 n=100/0 cpu=1000",
        f"  ~idle {8 * S}/{8 * S} n=80/80 cpu=800",
        f"  app.c {2 * S}/0 n=20/0 cpu=200",
        f"    ~idle {2 * S}/{2 * S} n=20/20 cpu=200",
    ]


def test_samples_inside_a_measured_child_go_to_the_child_and_strangers_are_skipped(builder):
    builder.call("app.m", 1, start=0, end=100, line=10)
    builder.call("app.c", 2, 1, start=20, end=60, line=30)
    builder.frame(1, "m", line=10)
    builder.frame(2, "c", line=30)
    builder.frame(3, "a", line=50)
    builder.frame(4, "b", line=60)
    builder.frame(5, "x", line=1, file="other.py")
    builder.sample(10, [1, 3])  # m's time until c starts
    builder.sample(30, [1, 2, 4])
    builder.sample(50, [1, 2])
    builder.sample(70, [1, 3])
    builder.sample(80, [5])  # neither m's frame nor an ancestor's: cannot be placed

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        "app.m 100/40 n=4/0 cpu=0",
        "  ~a 20/20 n=2/2 cpu=0",
        "  app.c 40/30 n=2/1 cpu=0",
        "    ~b 10/10 n=1/1 cpu=0",
    ]
    assert tree.samples_skipped == 1


def test_a_sample_is_cut_at_its_node_end_and_its_next_child(builder):
    builder.call("app.m", 1, start=0, end=100, line=10)
    builder.call("app.c", 2, 1, start=30, end=60, line=30)
    builder.frame(1, "m", line=10)
    builder.frame(3, "a", line=50)
    builder.sample(20, [1, 3], duration=25)  # c starts after 10 of its 25
    builder.sample(95, [1, 3], duration=25)  # m ends after 5

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree)[:2] == ["app.m 100/55 n=2/0 cpu=0", "  ~a 15/15 n=2/2 cpu=0"]


def test_a_caller_waiting_on_a_pool_keeps_its_own_threads_estimated_time(builder):
    # main waits on thread 1 for work running on a pool thread. The work covers 80 ns of main's
    # window, but on another thread, in parallel: main's own thread was free all 100 ns, so the
    # wait's samples keep their 100 ns (they are clamped to the thread's free time, not to the
    # self time, which the parallel work reduces to 20 ns).
    builder.thread(1, "MainThread")
    builder.thread(2, "pool-0")
    builder.call("app.main", 1, start=0, end=100, line=10, tid=1)
    builder.handoff(77, 1, submitted=5)
    builder.call("app.work", 2, 1, start=10, end=90, line=40, tid=2, hid=77)
    builder.frame(1, "main", line=10)
    builder.frame(2, "Future.result", line=400, file="concurrent/futures/_base.py")
    builder.frame(3, "work", line=40)
    builder.frame(4, "crunch", line=60)
    builder.frame(9, "_worker", line=70, file="concurrent/futures/thread.py")
    for t in range(0, 100, 10):
        builder.sample(t, [1, 2], tid=1, duration=10, cpu=1)
    for t in (20, 40, 60):
        builder.sample(t, [9, 3, 4], tid=2, duration=20, cpu=20)
    builder.sample(95, [9], tid=2, duration=5)  # the pool thread idle again: no node's

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        "app.main 100/0 n=13/0 cpu=70",
        "  ~Future.result 100/100 n=10/10 cpu=10",
        "  app.work 80/20 n=3/0 cpu=60",
        "    ~crunch 60/60 n=3/3 cpu=60",
    ]
    crunch = tree.root.children[1].children[0]
    assert (crunch.thread.name, crunch.start_ns, crunch.end_ns) == ("pool-0", 20, 80)
    assert tree.samples_skipped == 0


def test_a_running_call_keeps_its_unknown_self_time(builder):
    builder.call("app.serve", 1, start=0, line=10)
    builder.frame(1, "serve", line=10)
    builder.frame(2, "accept", line=20)
    builder.sample(500, [1, 2], duration=50)

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == ["app.serve None/None n=1/0 cpu=0", "  ~accept 50/50 n=1/1 cpu=0"]
    assert tree.root.children[0].end_ns == 550


def test_merging_leaves_its_input_alone_and_can_be_repeated(builder):
    builder.call("app.h", 1, start=0, end=100, line=10)
    builder.frame(1, "h", line=10)
    builder.frame(2, "g", line=20)
    builder.sample(10, [1, 2])
    data = builder.data()
    tree = build_tree(data)
    before = merged(tree)

    once = merge_samples(tree, data)
    twice = merge_samples(once, data)

    assert merged(tree) == before == ["app.h 100/100 n=0/0 cpu=-"]
    assert merged(once) == merged(twice) == ["app.h 100/90 n=1/0 cpu=0", "  ~g 10/10 n=1/1 cpu=0"]

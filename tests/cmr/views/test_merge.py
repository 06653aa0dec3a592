"""Merging stack samples into a call tree: which node each sample belongs to, where its stack is
cut, how stacks merge, and how their time is counted. Every expected tree is written by hand."""

from __future__ import annotations

import dataclasses

from cmr.store.base import SampleRecord
from cmr.views.model import KIND_ESTIMATED, KIND_MEASURED, SequenceTree, walk
from cmr.views.render.text import render_header
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import SequenceBuilder

S = 1_000_000_000


def merged(tree: SequenceTree, *, frames: bool = False) -> list[str]:
    """Per node: ``~`` for estimated, name, duration/self, samples total/self, CPU time."""
    lines = []
    for node, depth in walk(tree.root):
        mark = "~" if node.kind == KIND_ESTIMATED else ""
        cpu = "-" if node.cpu_ns is None else node.cpu_ns
        where = f" @{node.frame[2]}" if frames and node.frame is not None else ""
        lines.append(
            f"{'  ' * depth}{mark}{node.name}{where} {node.duration_ns}/{node.self_ns} "
            f"n={node.samples}/{node.self_samples} cpu={cpu}"
        )
    return lines


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


def _two_tasks(builder: SequenceBuilder) -> None:
    """``app.main`` running two interleaved asyncio tasks on its thread."""
    builder.call("app.main", 1, start=0, end=100, line=10)
    builder.call("app.task_a", 2, 1, start=10, end=90, line=20)
    builder.call("app.task_b", 3, 1, start=20, end=80, line=30)
    builder.frame(1, "main", line=10)
    builder.frame(2, "task_a", line=20)
    builder.frame(3, "task_b", line=30)


def test_interleaved_tasks_on_one_thread_get_the_samples_that_show_their_frame(builder):
    _two_tasks(builder)
    builder.frame(4, "fetch", line=40)
    builder.sample(30, [1, 2, 4])
    builder.sample(40, [1, 3, 4])
    builder.sample(50, [1, 3, 4])

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        "app.main 100/20 n=3/0 cpu=0",
        "  app.task_a 80/70 n=1/0 cpu=0",
        "    ~fetch 10/10 n=1/1 cpu=0",
        "  app.task_b 60/40 n=2/0 cpu=0",
        "    ~fetch 20/20 n=2/2 cpu=0",
    ]


def test_the_event_loop_between_two_task_steps_goes_to_the_caller_not_to_a_task(builder):
    # A busy loop thread gives up the GIL in its selector between two task steps, so the sampler
    # mostly sees it there: a stack of neither task. It went to the task that started first.
    _two_tasks(builder)
    builder.frame(5, "run_forever", line=50, file="asyncio.py")
    builder.frame(6, "select", line=60, file="selectors.py")
    builder.sample(30, [1, 5, 6])
    builder.sample(40, [1, 5, 6])
    builder.sample(50, [1, 5, 2])  # a task's step: its own frame on the stack

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [  # main's own time (before and after the tasks) stays its own
        "app.main 100/20 n=3/0 cpu=0",
        "  app.task_a 80/80 n=1/1 cpu=0",
        "  app.task_b 60/60 n=0/0 cpu=-",
        "  ~run_forever 20/0 n=2/0 cpu=0",
        "    ~select 20/20 n=2/2 cpu=0",
    ]
    assert tree.samples_between_tasks == 2  # counted, and said: the tasks were not guessed
    assert "2 samples fell among interleaved asyncio tasks" in render_header(tree)


def test_a_busy_loop_sampled_waiting_is_said_to_have_been_read_at_its_gil_releases(builder):
    # A sampler thread reads a busy event loop where it releases the GIL: in select(), between
    # steps. Samples there that used the CPU all along were the tasks' time, which ones unknown.
    _two_tasks(builder)
    builder.frame(5, "run_forever", line=50, file="asyncio.py")
    builder.frame(6, "select", line=60, file="selectors.py")
    builder.sample(30, [1, 5, 6], cpu=10)
    builder.sample(40, [1, 5, 6], cpu=10)
    builder.sample(50, [1, 5, 2], cpu=10)

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert (tree.loop_busy_ns, tree.loop_busy_samples, tree.samples_placed) == (20, 2, 3)
    assert "20 ns of CPU was sampled as the event loop waiting" in render_header(tree)


def test_a_loop_that_really_waits_or_is_seen_where_it_is_is_not_flagged(builder):
    _two_tasks(builder)
    builder.frame(5, "run_forever", line=50, file="asyncio.py")
    builder.frame(6, "select", line=60, file="selectors.py")
    builder.frame(7, "spin", line=70)
    builder.sample(21, [1, 5, 6], cpu=1)  # waiting for I/O: hardly on the CPU
    for t in range(31, 81, 2):  # a busy loop sampled where it is: in its tasks' steps
        builder.sample(t, [1, 5, 2 if t % 4 == 1 else 3, 7], cpu=2)

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert tree.loop_busy_ns > 0  # sampled at the loop, but hardly on the CPU there
    assert tree.loop_busy_samples * 10 < tree.samples_placed  # under a tenth: not flagged
    assert "sampled as the event loop waiting" not in render_header(tree)


def test_one_busy_sample_at_the_loop_among_many_in_short_calls_is_not_flagged(builder):
    # A loop read where it is: one tick of 15 fell at the loop, and stands for a whole tick of
    # CPU, while the others stand only for the parts of theirs inside short calls.
    _two_tasks(builder)
    builder.frame(5, "run_forever", line=50, file="asyncio.py")
    builder.frame(6, "select", line=60, file="selectors.py")
    for t in range(31, 45):
        builder.sample(t, [1, 2 if t % 2 else 3], duration=1, cpu=1)
    builder.sample(45, [1, 5, 6], duration=20, cpu=20)

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert (tree.loop_busy_samples, tree.samples_placed) == (1, 15)
    assert "sampled as the event loop waiting" not in render_header(tree)


def test_samples_of_one_task_s_own_frames_are_not_counted_as_between_tasks(builder):
    _two_tasks(builder)
    builder.sample(30, [1, 2])
    builder.sample(40, [1, 3])

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert tree.samples_between_tasks == 0
    assert "event loop" not in render_header(tree)


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


def test_a_function_two_interleaved_tasks_run_is_not_guessed_onto_the_first(builder):
    # asyncio.gather(task(), task()): both tasks run the same function, so a sample inside it
    # cannot say which. It went to the task that started first, every time.
    builder.call("app.main", 1, start=0, end=100, line=10)
    builder.call("app.task", 2, 1, start=10, end=90, line=20)
    builder.call("app.task", 3, 1, start=20, end=80, line=20)
    builder.frame(1, "run", line=5, file="asyncio.py")
    builder.frame(2, "task", line=20)
    builder.frame(3, "spin", line=40)
    builder.sample(15, [1, 2, 3])  # before the second task began: the first's
    builder.sample(30, [1, 2, 3])
    builder.sample(50, [1, 2, 3])

    tree = merge_samples(build_tree(builder.data()), builder.data())

    first, second, unknown = tree.root.children
    assert (first.samples, second.samples) == (1, 0)
    assert (unknown.kind, unknown.name, unknown.samples) == (KIND_ESTIMATED, "task", 2)
    # The time ran inside the tasks, which cover all of main but 20: it is not squeezed into it.
    assert unknown.duration_ns == 20  # the two samples, 10 each
    assert tree.root.self_ns == 20
    assert [c.name for c in unknown.children] == ["spin"]
    assert tree.samples_between_tasks == 2


def _loop_frames(builder: SequenceBuilder) -> None:
    """The stack of an event loop that no measured call runs (``asyncio.run`` of a traced
    coroutine): the script, asyncio's iteration, the selector."""
    builder.frame(10, "<module>", line=1, file="script.py")
    builder.frame(11, "BaseEventLoop._run_once", line=1845, file="/py/asyncio/base_events.py")
    builder.frame(12, "EpollSelector.select", line=451, file="/py/selectors.py")


def test_a_loop_no_call_runs_between_its_tasks_steps_goes_under_their_caller(builder):
    # The tasks' caller is a coroutine too, suspended: no measured frame on the stack at all.
    _two_tasks(builder)
    _loop_frames(builder)
    builder.sample(30, [10, 11, 12], cpu=10)
    builder.sample(40, [10, 11, 12], cpu=10)
    builder.sample(50, [10, 11, 2], cpu=10)  # a task's step: its own frame on the stack

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        "app.main 100/20 n=3/0 cpu=30",
        "  app.task_a 80/80 n=1/1 cpu=10",
        "  app.task_b 60/60 n=0/0 cpu=-",
        "  ~BaseEventLoop._run_once 20/0 n=2/0 cpu=20",
        "    ~EpollSelector.select 20/20 n=2/2 cpu=20",
    ]
    assert tree.samples_between_tasks == 2
    assert (tree.loop_busy_ns, tree.samples_skipped) == (20, 0)
    assert "20 ns of CPU was sampled as the event loop waiting" in render_header(tree)


def test_a_loop_iterating_in_c_is_told_by_the_runner_innermost(builder):
    # uvloop: no Python frame of its own; while it waits, ``asyncio.Runner.run`` (asyncio.run,
    # uvloop.run) is the innermost frame, and a step of a task runs right above it.
    _two_tasks(builder)
    builder.frame(10, "<module>", line=1, file="script.py")
    builder.frame(11, "Runner.run", line=118, file="/py/asyncio/runners.py")
    builder.sample(30, [10, 11], cpu=0)
    builder.sample(40, [10, 11], cpu=0)
    builder.sample(50, [10, 11, 2], cpu=10)  # a step of task_a: its own frame on the stack

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        "app.main 100/20 n=3/0 cpu=10",
        "  app.task_a 80/80 n=1/1 cpu=10",
        "  app.task_b 60/60 n=0/0 cpu=-",
        "  ~Runner.run 20/20 n=2/2 cpu=0",
    ]
    assert tree.samples_between_tasks == 2
    assert (tree.loop_busy_ns, tree.samples_skipped) == (0, 0)


def test_a_collapsed_loop_sample_outlasting_the_tasks_keeps_its_time_among_them(builder):
    # A thread idle in its loop for a long wait is one collapsed sample (weight 5, 30-95): most
    # of it fell while both tasks were suspended (among them, under main), a little after
    # task_b ended (under task_a) and after both (main alone). Its time among the tasks is not
    # squeezed into the little time main had to itself for the piece that came last.
    _two_tasks(builder)
    _loop_frames(builder)
    builder.sample(30, [10, 11, 12], weight=5, duration=65)

    tree = merge_samples(build_tree(builder.data()), builder.data())

    lines = merged(tree)
    assert "  ~BaseEventLoop._run_once 55/0 n=4/0 cpu=0" in lines, lines
    assert "    ~BaseEventLoop._run_once 10/0 n=1/0 cpu=0" in lines, lines  # under task_a


def test_a_loop_no_call_runs_with_one_task_suspended_goes_under_that_task(builder):
    _two_tasks(builder)
    _loop_frames(builder)
    builder.sample(85, [10, 11, 12], cpu=10)  # only task_a (10-90) is still running

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree)[1:4] == [  # its 5 ns inside task_a, half its CPU time
        "  app.task_a 80/75 n=1/0 cpu=5",
        "    ~BaseEventLoop._run_once 5/0 n=1/0 cpu=5",
        "      ~EpollSelector.select 5/5 n=1/1 cpu=5",
    ]
    assert (tree.samples_between_tasks, tree.loop_busy_ns) == (0, 5)


def test_a_stack_of_neither_the_loop_nor_a_call_is_still_not_guessed(builder):
    _two_tasks(builder)
    _loop_frames(builder)
    builder.frame(13, "elsewhere", line=70)
    builder.sample(30, [10, 13], cpu=1)

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert tree.samples_skipped == 1
    assert tree.loop_busy_ns == 0


def test_a_collapsed_sample_showing_a_task_is_not_placed_before_the_task_started(builder):
    # The main thread, taken off the CPU in C on its way into task_b's first step, answers
    # three ticks there at once, claiming the stack since it was first asked (15, before
    # task_b started at 20): the piece before 20 is not task_a's, under the event loop, and
    # the three ticks fell in task_b.
    _two_tasks(builder)
    _loop_frames(builder)
    builder.frame(4, "spin_b", line=40)
    builder.sample(15, [10, 11, 3, 4], weight=3, duration=15, ticks=(15, 28))

    tree = merge_samples(build_tree(builder.data()), builder.data())

    assert merged(tree) == [
        "app.main 100/20 n=3/0 cpu=0",
        "  app.task_a 80/80 n=0/0 cpu=-",
        "  app.task_b 60/50 n=3/0 cpu=0",
        "    ~spin_b 10/10 n=3/3 cpu=0",
    ]


def _gap(t: int, duration: int) -> SampleRecord:
    """A sampler gap of process 1 (``invoseq.wire.GAP_TID``): no thread read from ``t``."""
    return SampleRecord(1, 0, t, max(1, duration // 10), duration, 0, (), ())


def test_time_the_sampler_did_not_tick_is_measured_within_the_sequence_and_said(builder):
    _two_tasks(builder)  # main runs 0-100
    data = dataclasses.replace(
        builder.data(), gaps=[_gap(-50, 60), _gap(5, 20), _gap(60, 60)]
    )  # 10 before-and-into, 5-25 (overlapping the first), 60-100 (cut at main's end)

    tree = merge_samples(build_tree(data), data)

    assert tree.unsampled_ns == 10 + 15 + 40
    assert "≈ 65 ns of this sequence passed without a tick of the sampler" in render_header(tree)


def test_a_short_gap_is_not_said(builder):
    _two_tasks(builder)
    data = dataclasses.replace(builder.data(), gaps=[_gap(50, 9)])

    tree = merge_samples(build_tree(data), data)

    assert tree.unsampled_ns == 9  # under a tenth of the sequence's 100 ns
    assert "without a tick of the sampler" not in render_header(tree)

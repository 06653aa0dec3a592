"""Merging the samples of asyncio tasks interleaved on one thread: each task gets the samples that
show its frame; the event loop between their steps goes under their caller (or under the one
task still running), whether a Python loop or one iterating in C; a busy loop sampled waiting
is said; what cannot be told apart is counted and said, not guessed. Every expected tree is
written by hand."""

from __future__ import annotations

from cmr.views.model import KIND_ESTIMATED
from cmr.views.render.text import render_header
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import SequenceBuilder, merged
from tests.cmr.views.conftest import two_tasks as _two_tasks


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

"""Sequences across threads, pools and asyncio tasks: exact trees, hand-offs and queue wait."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

import tracer
from tracer import _patching as patching
from tracer.testing import Capture, capture

M = __name__ + "."


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with capture(instrument=True) as trace:
        try:
            yield trace
        finally:
            tracer.uninstrument()


@tracer.traced
def fetch(i: int) -> int:
    return parse(i)


@tracer.traced
def parse(i: int) -> int:
    return i * 2


def untraced_task(i: int) -> int:
    return fetch(i)


@tracer.traced
def fan_out(pool: ThreadPoolExecutor) -> list[int]:
    futures = [pool.submit(fetch, 1), pool.submit(untraced_task, 2)]
    return [f.result() for f in futures] + list(pool.map(untraced_task, [3]))


FETCH = {"name": "fetch", "children": [{"name": "parse"}]}


def test_fan_out_to_a_pool_continues_the_sequence(trace: Capture) -> None:
    with ThreadPoolExecutor(2) as pool:
        assert fan_out(pool) == [2, 4, 6]
    (tree,) = trace.trees(strip=M)
    assert tree["name"] == "fan_out"
    # the pool's two workers take the first two at once: which of them starts first varies
    assert sorted(tree["children"], key=lambda child: child["name"]) == [
        {**FETCH, "handoff": "thread"},  # a traced callable: its own node continues
        {"name": "untraced_task", "handoff": "thread", "children": [FETCH]},
        {"name": "untraced_task", "handoff": "thread", "children": [FETCH]},
    ]
    threads = {i.name.removeprefix(M): i.thread_name for i in trace.invocations()}
    assert threads["fan_out"] == "MainThread"
    assert threads["parse"].startswith("ThreadPoolExecutor")


@tracer.traced
def outer_task(inner_pool: ThreadPoolExecutor) -> int:
    return inner_pool.submit(fetch, 5).result()


@tracer.traced
def pool_in_pool() -> int:
    with ThreadPoolExecutor(1) as outer, ThreadPoolExecutor(1) as inner:
        return outer.submit(outer_task, inner).result()


def test_pool_inside_a_pool(trace: Capture) -> None:
    assert pool_in_pool() == 10
    assert trace.trees(strip=M) == [
        {
            "name": "pool_in_pool",
            "children": [
                {
                    "name": "outer_task",
                    "handoff": "thread",
                    "children": [{**FETCH, "handoff": "thread"}],
                }
            ],
        }
    ]


def test_concurrent_sequences_sharing_a_pool_each_get_exactly_their_own_tasks(
    trace: Capture,
) -> None:
    mismatches: list[str] = []
    started = threading.Barrier(50, timeout=60)

    def task(expected: str | None) -> None:
        if tracer.current_sequence() != expected:
            mismatches.append(f"{tracer.current_sequence()} != {expected}")
        fetch(0)

    @tracer.traced
    def request(pool: ThreadPoolExecutor) -> None:
        started.wait()  # all 50 sequences are open at once
        seq = tracer.current_sequence()
        for future in [pool.submit(task, seq) for _ in range(4)]:
            future.result()

    with ThreadPoolExecutor(4) as pool:
        requests = [threading.Thread(target=request, args=(pool,)) for _ in range(50)]
        for thread in requests:
            thread.start()
        for thread in requests:
            thread.join(60)
    assert mismatches == []
    invocations = trace.invocations()
    by_iid = {i.iid: i for i in invocations}
    roots = [i for i in invocations if i.parent == 0]
    assert len(roots) == 50
    assert {i.handoff for i in roots} == {None}  # started outside any sequence: no hand-off
    tasks = [i for i in invocations if i.handoff == "thread"]
    assert len(tasks) == 200
    for root in roots:
        own = [t for t in tasks if t.parent == root.iid]
        assert len(own) == 4
        assert {t.seq for t in own} == {root.seq}
        fetches = [i for i in invocations if i.name == M + "fetch" and by_iid[i.parent] in own]
        assert len(fetches) == 4
        assert {f.seq for f in fetches} == {root.seq}
    pool_threads = {t.thread_name for t in tasks}
    assert 1 < len(pool_threads) <= 4  # pool threads served many sequences


@tracer.traced
async def step(i: int) -> int:
    await asyncio.sleep(0)  # interleave with the other tasks
    await asyncio.sleep(0)
    return i


@tracer.traced
async def gather_all() -> tuple[int, int, int]:
    results = await asyncio.gather(*(step(i) for i in range(100)))
    loop = asyncio.get_running_loop()
    in_executor = await loop.run_in_executor(None, fetch, 3)
    in_thread = await asyncio.to_thread(untraced_task, 4)
    return sum(results), in_executor, in_thread


def test_gather_of_interleaving_tasks_run_in_executor_and_to_thread(trace: Capture) -> None:
    assert asyncio.run(gather_all()) == (4950, 6, 8)
    [root] = trace.trees(strip=M)
    assert root == {
        "name": "gather_all",
        "children": [{"name": "step", "handoff": "task"}] * 100
        + [
            {**FETCH, "handoff": "thread"},
            {"name": "untraced_task", "handoff": "thread", "children": [FETCH]},
        ],
    }


def test_task_group_and_create_task_are_task_hand_offs(trace: Capture) -> None:
    @tracer.traced
    async def main() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(step(1))
        await asyncio.create_task(step(2))

    asyncio.run(main())
    assert trace.trees(
        strip=M + "test_task_group_and_create_task_are_task_hand_offs.<locals>."
    ) == [
        {
            "name": "main",
            "children": [
                {"name": M + "step", "handoff": "task"},
                {"name": M + "step", "handoff": "task"},
            ],
        }
    ]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager_start is new in Python 3.12")
def test_an_eagerly_started_task_is_a_task_hand_off(trace: Capture) -> None:
    """``asyncio.Task(coro, eager_start=True)``, as aiohttp's server starts each request."""

    @tracer.traced
    async def main() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.Task(step(3), loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]

    asyncio.run(main())
    assert trace.trees(strip=M) == [
        {
            "name": "test_an_eagerly_started_task_is_a_task_hand_off.<locals>.main",
            "children": [{"name": "step", "handoff": "task"}],
        }
    ]


class Worker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="worker-1")
        self.result = 0

    def run(self) -> None:
        self.result = fetch(7)


def test_thread_subclass_timer_and_run_without_start(trace: Capture) -> None:
    @tracer.traced
    def spawn() -> int:
        worker = Worker()
        worker.start()
        worker.join(30)
        timer = threading.Timer(0, fetch, args=(1,))
        timer.start()
        timer.join(30)
        inline = Worker()
        inline.run()  # no start(): runs here, in this thread, with no hand-off
        return worker.result + inline.result

    assert spawn() == 28
    [root] = trace.trees(strip=M)
    assert root == {
        "name": "test_thread_subclass_timer_and_run_without_start.<locals>.spawn",
        "children": [
            {"name": "Worker.run", "handoff": "thread", "children": [FETCH]},
            {**FETCH, "handoff": "thread"},
            FETCH,
        ],
    }
    threads = [i.thread_name for i in trace.invocations() if i.name == M + "Worker.run"]
    assert threads == ["worker-1"]


@pytest.mark.timing
def test_queue_wait_covers_the_time_the_pool_was_saturated(trace: Capture) -> None:
    busy = threading.Event()
    release = threading.Event()

    def blocker() -> None:
        busy.set()
        release.wait(60)

    @tracer.traced
    def submit_while_busy(pool: ThreadPoolExecutor) -> int:
        first = pool.submit(blocker)
        assert busy.wait(60)
        queued = pool.submit(fetch, 1)
        submitted = time.perf_counter_ns()  # after the hand-off was recorded, inside submit
        release.wait(0.05)  # hold the only worker busy for a while
        held = time.perf_counter_ns() - submitted
        release.set()
        first.result()
        queued.result()
        return held

    with ThreadPoolExecutor(1) as pool:
        held = submit_while_busy(pool)
    [waited] = [i for i in trace.invocations() if i.name == M + "fetch"]
    assert waited.handoff == "thread"
    assert waited.queued_ns is not None
    assert waited.queued_ns >= held


@tracer.traced
def submit_in_a_copied_context(pool: ThreadPoolExecutor) -> int:
    copied = contextvars.copy_context()
    return (
        pool.submit(copied.run, fetch, 5).result()
        + pool.submit(functools.partial(copied.run, fetch), 6).result()
    )


def test_work_that_carries_its_own_context_gets_no_hand_off_of_ours(trace: Capture) -> None:
    """``pool.submit(ctx.run, fn)`` runs ``fn`` in the context copied in the traced call, exact
    already: no hop node beside it (``handoff.carries_context``)."""
    with ThreadPoolExecutor(1) as pool:
        assert submit_in_a_copied_context(pool) == 22
    assert trace.trees(strip=M) == [
        {"name": "submit_in_a_copied_context", "children": [FETCH, FETCH]}
    ]


def test_work_outside_any_sequence_is_left_alone(trace: Capture) -> None:
    with ThreadPoolExecutor(2) as pool:
        assert pool.submit(untraced_task, 1).result() == 2
    assert trace.trees(strip=M) == [FETCH]


def patchable() -> tuple[object, ...]:
    return (
        threading.Thread.__dict__["start"],
        ThreadPoolExecutor.__dict__["submit"],
        asyncio.Task,
        asyncio.tasks.Task,
        asyncio.to_thread,
    )


def test_instrument_twice_then_uninstrument_restores_every_object() -> None:
    originals = patchable()
    tracer.instrument()
    tracer.instrument()
    try:
        assert patching.instrumented()
        assert threading.Thread.__dict__["start"] is not originals[0]
        assert asyncio.tasks.Task is asyncio.Task  # one class, as asyncio has it
        assert issubclass(asyncio.Task, originals[2])  # type: ignore[arg-type]
        assert asyncio.Task is not originals[2]
    finally:
        tracer.uninstrument()
        tracer.uninstrument()
    for now, then in zip(patchable(), originals, strict=True):
        assert now is then

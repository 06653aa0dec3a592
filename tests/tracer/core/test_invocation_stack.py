"""Nested sync calls find their parent on their thread's invocation stack and leave the ContextVar
alone (docs/architecture.md, "The invocation stack"): what that means for contexts copied inside
them, by code the tracer patches (exact) and by code it does not (the sequence always right, the
parent an ancestor, marked approximate), and for roots one after another. Both hot paths run
this (the suite runs once with INVOSEQ_PURE=1)."""

from __future__ import annotations

import _contextvars
import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

import tracer
from tests.tracer.core.implementations import needs_c_path
from tracer import traced
from tracer._core import context
from tracer.testing import Capture, CapturedInvocation, capture

MODULE = __name__ + "."
APPROXIMATE = {"invoseq.parent": "approximate"}


@pytest.fixture
def trace() -> Iterator[Capture]:
    with capture(sample_interval_ms=0) as captured:
        tracer.instrument()  # contextvars.copy_context, threads, tasks
        try:
            yield captured
        finally:
            tracer.uninstrument()


def one(trace: Capture, name: str) -> CapturedInvocation:
    """The one invocation of the function of that name (a module's, or a test's local one)."""
    [found] = [i for i in trace.invocations() if i.name.rsplit(".", 1)[-1] == name]
    return found


def in_thread(fn: Callable[[], Any]) -> None:
    """Run fn in a thread the tracer does not hand off to (started outside any patching)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.run = run  # type: ignore[method-assign]  # bound already: no hand-off of ours
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    assert not errors


@traced
def leaf() -> str | None:
    return tracer.current_sequence()


@traced
def root_copies(copy: Callable[[], contextvars.Context]) -> contextvars.Context:
    return nested_copies(copy)


@traced
def nested_copies(copy: Callable[[], contextvars.Context]) -> contextvars.Context:
    return copy()


def test_a_copy_made_inside_a_nested_call_through_copy_context_carries_that_call(
    trace: Capture,
) -> None:
    copied = root_copies(contextvars.copy_context)
    in_thread(lambda: copied.run(leaf))
    copier, called = one(trace, "nested_copies"), one(trace, "leaf")
    assert (called.seq, called.parent) == (copier.seq, copier.iid)
    assert not called.attributes


def test_a_copy_made_by_code_we_do_not_patch_keeps_the_sequence_with_the_root_as_parent(
    trace: Capture,
) -> None:
    copied = root_copies(_contextvars.copy_context)  # C's copy: the patch never sees it
    in_thread(lambda: copied.run(leaf))
    root, called = one(trace, "root_copies"), one(trace, "leaf")
    assert (called.seq, called.parent) == (root.seq, root.iid)  # an ancestor of nested_copies
    assert called.attributes == APPROXIMATE


@traced
def steps(copies: list[contextvars.Context]) -> Iterator[str | None]:
    """A generator whose steps call a traced function and copy their context the C way."""
    for _ in range(2):
        copies.append(_contextvars.copy_context())
        yield leaf()


@traced
def drives(generator: Iterator[str | None]) -> list[str | None]:
    return list(generator)


def test_calls_in_a_generator_s_steps_nest_under_it_and_copies_keep_its_sequence(
    trace: Capture,
) -> None:
    copies: list[contextvars.Context] = []
    seqs = drives(steps(copies))
    generator, driver = one(trace, "steps"), one(trace, "drives")
    assert seqs == [driver.seq, driver.seq]
    assert (generator.seq, generator.parent) == (driver.seq, driver.iid)
    leaves = [i for i in trace.invocations() if i.name == MODULE + "leaf"]
    assert [(i.seq, i.parent) for i in leaves] == [(generator.seq, generator.iid)] * 2
    for copied in copies:  # copied by C inside a step: the sequence, an ancestor for parent
        assert copied.run(tracer.current_sequence) == generator.seq


def test_a_generator_resumed_outside_its_sequence_keeps_its_calls_and_copies_in_it(
    trace: Capture,
) -> None:
    copies: list[contextvars.Context] = []

    @traced
    def starts() -> tuple[Iterator[str | None], str | None]:
        generator = steps(copies)
        return generator, next(generator)  # its first step, in this sequence

    generator_object, first = starts()
    assert tracer.current_sequence() is None  # its root has ended: the next step runs under none
    seqs = [first, *generator_object]
    root, generator = one(trace, "starts"), one(trace, "steps")
    assert seqs == [root.seq, root.seq]
    assert generator.parent == root.iid
    leaves = [i for i in trace.invocations() if i.name == MODULE + "leaf"]
    assert [(i.seq, i.parent) for i in leaves] == [(root.seq, generator.iid)] * 2
    assert [copied.run(tracer.current_sequence) for copied in copies] == [root.seq, root.seq]
    assert tracer.current_sequence() is None


@traced
def numbers(other: Iterator[int] | None) -> Iterator[int]:
    yield 1
    if other is not None:
        next(other)  # another instance of this code, of another sequence, steps inside this step
        leaf()
    yield 2


def test_a_step_that_resumes_another_sequence_s_strand_of_the_same_code_keeps_its_calls(
    trace: Capture,
) -> None:
    # The other strand's step runs under its own value (it is of another sequence), so the
    # entry on top of the stack at its yield is this strand's step, of the same code: the yield
    # must end the other's step (its value reset), not this one's.
    other = numbers(None)

    @traced
    def begins_other() -> None:
        next(other)  # its Start, in this sequence

    @traced
    def outer() -> list[int]:
        return list(numbers(other))

    begins_other()
    assert outer() == [1, 2]
    mine = one(trace, "outer")
    [inside] = [
        i for i in trace.invocations() if i.name == MODULE + "numbers" and i.seq == mine.seq
    ]
    [called] = [i for i in trace.invocations() if i.name == MODULE + "leaf"]
    assert (called.seq, called.parent) == (mine.seq, inside.iid)
    assert inside.parent == mine.iid
    assert tracer.current_sequence() is None
    other.close()


@traced
def steps_starting_threads() -> Iterator[int]:
    for i in range(2):
        thread = threading.Thread(target=leaf)  # a thread of its own: a buffer of its own
        thread.start()
        thread.join(60)
        yield i


@traced
def consumes() -> None:
    for _ in steps_starting_threads():
        leaf()  # between the generator's steps: the caller's call


def test_a_step_that_started_a_thread_ends_at_its_yield(trace: Capture) -> None:
    consumes()
    caller, generator = one(trace, "consumes"), one(trace, "steps_starting_threads")
    parents = sorted(i.parent for i in trace.invocations() if i.name == MODULE + "leaf")
    assert parents == sorted([caller.iid] * 2 + [generator.iid] * 2)


def test_a_user_thread_running_a_copied_context_has_the_exact_parent(trace: Capture) -> None:
    @traced
    def starts() -> None:
        copied = contextvars.copy_context()
        worker = threading.Thread(target=copied.run, args=(leaf,))  # the thread patch too
        worker.start()
        worker.join(60)

    @traced
    def outer() -> None:
        starts()

    outer()
    starter, called = (
        one(
            trace,
            "starts",
        ),
        one(trace, "leaf"),
    )
    assert (called.seq, called.parent) == (starter.seq, starter.iid)


def test_call_soon_with_a_copied_context_inside_a_nested_call_is_exact(trace: Capture) -> None:
    done: list[str | None] = []

    @traced
    def schedule(loop: asyncio.AbstractEventLoop, copy: Callable[[], contextvars.Context]) -> None:
        loop.call_soon(lambda: done.append(leaf()), context=copy())

    @traced
    async def main() -> None:
        loop = asyncio.get_running_loop()
        schedule(loop, contextvars.copy_context)
        schedule(loop, _contextvars.copy_context)
        await asyncio.sleep(0)

    asyncio.run(main())
    assert len(done) == 2
    first, second = sorted(
        (i for i in trace.invocations() if i.name == MODULE + "leaf"), key=lambda i: i.iid
    )
    schedulers = sorted(
        (i for i in trace.invocations() if i.name.endswith(".schedule")), key=lambda i: i.iid
    )
    coroutine = one(trace, "main")
    assert first.parent == schedulers[0].iid  # copied through contextvars: the exact call
    # copied by C inside the coroutine's step: the coroutine, the strand it ran in (on its own
    # thread, not marked: the rule's documented gap)
    assert second.parent == coroutine.iid
    assert first.seq == second.seq == coroutine.seq


def test_a_sync_call_that_runs_an_event_loop_is_the_parent_of_what_the_loop_runs(
    trace: Capture,
) -> None:
    @traced
    async def main() -> str | None:
        return leaf()

    @traced
    def runs_a_loop() -> str | None:
        return asyncio.run(main())

    @traced
    def outer() -> str | None:
        return runs_a_loop()

    assert outer() is not None
    runner = one(
        trace,
        "runs_a_loop",
    )
    coroutine = one(
        trace,
        "main",
    )
    assert coroutine.parent == runner.iid  # through the task's hand-off
    assert one(trace, "leaf").parent == coroutine.iid
    assert len({i.seq for i in trace.invocations()}) == 1


def test_anyio_from_a_worker_thread_back_to_the_loop_keeps_the_exact_call(trace: Capture) -> None:
    @traced
    def on_the_loop() -> str | None:
        return tracer.current_sequence()

    @traced
    def calls_back() -> str | None:
        return anyio.from_thread.run_sync(on_the_loop)

    @traced
    def in_the_worker() -> str | None:
        return calls_back()

    @traced
    async def main() -> str | None:
        return await anyio.to_thread.run_sync(in_the_worker)

    assert anyio.run(main) is not None
    back, caller = one(trace, "on_the_loop"), one(trace, "calls_back")
    assert (back.seq, back.parent) == (caller.seq, caller.iid)
    assert not back.attributes


def test_roots_one_after_another_each_have_a_sequence_and_leave_none_behind(
    trace: Capture,
) -> None:
    seqs = [leaf() for _ in range(5)]
    assert len(set(seqs)) == 5
    assert tracer.current_sequence() is None
    roots = [i for i in trace.invocations() if i.name == MODULE + "leaf"]
    assert [r.parent for r in roots] == [0] * 5
    assert sorted(r.seq for r in roots) == sorted(s for s in seqs if s)


def test_a_copy_keeps_the_root_it_was_made_in_after_later_roots_in_its_context(
    trace: Capture,
) -> None:
    copied = root_copies(_contextvars.copy_context)
    later = [leaf() for _ in range(3)]  # roots in the context the copy was made in
    seen: list[str | None] = []
    in_thread(lambda: seen.append(copied.run(leaf)))
    first = one(trace, "root_copies")
    assert seen == [first.seq]
    assert first.seq not in later


def test_a_copy_made_after_a_root_ended_starts_a_sequence_of_its_own(trace: Capture) -> None:
    first = leaf()
    copied = _contextvars.copy_context()
    seen: list[str | None] = []
    in_thread(lambda: seen.append(copied.run(leaf)))
    assert seen[0] is not None
    assert seen[0] != first
    assert [i.parent for i in trace.invocations()] == [0, 0]


@needs_c_path
def test_a_c_root_reopens_the_value_it_left_in_its_context_instead_of_setting_it_again(
    trace: Capture,
) -> None:
    def body() -> None:
        # Holding the value would keep it from being reopened: the test keeps its id only.
        first_seq = leaf()
        value_id = id(context.current.get())  # the root's value, left closed: no sequence
        assert getattr(context.current.get(), "closed", False)
        assert tracer.current_sequence() is None
        second_seq = leaf()
        assert id(context.current.get()) == value_id  # opened again and closed: no write
        kept = _contextvars.copy_context()  # a copy holds it now: the next root sets its own
        third_seq = leaf()
        assert id(context.current.get()) != value_id
        assert kept.run(tracer.current_sequence) is None
        assert len({first_seq, second_seq, third_seq}) == 3

    contextvars.Context().run(body)  # a context of its own, which nothing else copies


def test_asgiref_async_to_sync_in_a_nested_call_is_exact_and_leaves_its_caller_as_it_was(
    trace: Capture,
) -> None:
    from asgiref.sync import async_to_sync

    @traced
    async def inside() -> str | None:
        return leaf()

    @traced
    def bridge() -> str | None:
        return async_to_sync(inside)()

    @traced
    def outer() -> tuple[str | None, str | None]:
        return bridge(), leaf()  # the second leaf comes after asgiref restored the context

    outer()
    caller, bridging, coroutine = one(trace, "outer"), one(trace, "bridge"), one(trace, "inside")
    leaves = sorted(
        (i for i in trace.invocations() if i.name == MODULE + "leaf"), key=lambda i: i.iid
    )
    assert coroutine.parent == bridging.iid  # the context asgiref copied carries the exact call
    assert [i.parent for i in leaves] == [coroutine.iid, caller.iid]  # not carried back to outer
    assert len({i.seq for i in trace.invocations()}) == 1


@traced
def tick() -> int:
    return 1


async def measured_call(after: list[Any]) -> None:
    """What an integration does around a client call (aiohttp, httpx): a measured invocation
    attached to the task's context across awaits, then detached."""
    from tracer._core import measured

    call = measured.begin()
    assert call is not None
    call.open(measured.method("client", "GET example"))
    token = context.current.set(call.value)
    try:
        tick()  # before any await
        await asyncio.sleep(0)
        tick()  # resumed: still inside the measured call
        await asyncio.sleep(0)
        after.append(call.iid)
    finally:
        context.current.reset(token)
        call.finish(0)


@traced
async def awaiting_a_measured_call(after: list[Any]) -> int:
    await measured_call(after)
    await asyncio.sleep(0)
    return tick()  # after it: the coroutine's own again


def test_a_value_set_inside_a_traced_coroutine_stays_in_effect_when_it_resumes(
    trace: Capture,
) -> None:
    after: list[Any] = []
    assert asyncio.run(awaiting_a_measured_call(after)) == 1
    by_name: dict[str, list[CapturedInvocation]] = {}
    for invocation in trace.invocations():
        by_name.setdefault(invocation.name, []).append(invocation)
    [caller] = by_name[MODULE + "awaiting_a_measured_call"]
    [client] = by_name["client.GET example"]
    assert (client.iid, client.parent) == (after[0], caller.iid)
    inside_before, inside_after, own = by_name[MODULE + "tick"]
    assert (inside_before.parent, inside_after.parent) == (client.iid, client.iid)
    assert own.parent == caller.iid
    assert not [i for i in trace.invocations() if i.attributes == APPROXIMATE]

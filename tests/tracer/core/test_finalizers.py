"""Traced code that the garbage collector runs: a collection runs finalizers on whichever thread
allocated, at any allocation, also inside the tracer's own bookkeeping. A suspended traced
generator in a reference cycle records its End when the collector closes it; that must neither
deadlock the thread (it once waited for a lock it held itself, and the sender, draining, waited
for it) nor lose an event. Both hot paths run this (the suite runs once with INVOSEQ_PURE=1)."""

from __future__ import annotations

import contextvars
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tracer
from tracer import traced
from tracer._core import context, recorder
from tracer.propagation import SequenceContext
from tracer.testing import Capture, capture

MODULE = __name__ + "."


@pytest.fixture
def trace() -> Iterator[Capture]:
    with capture(sample_interval_ms=0) as captured:
        yield captured


@traced
def suspended() -> Iterator[int]:
    yield 1
    yield 2


@traced
def work() -> int:
    return 3


class Cycle:
    """Garbage only the cyclic collector frees, holding a traced generator it will close."""

    def __init__(self) -> None:
        self.me = self
        self.generator = suspended()
        next(self.generator)


def in_new_thread(fn: Callable[[], Any]) -> None:
    """Run fn on a thread of its own (its first traced call registers it) and wait, bounded."""
    worker = threading.Thread(target=fn)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the thread is stuck in the tracer"


def test_a_collection_inside_a_threads_registration_closes_traced_generators_and_loses_nothing(
    trace: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    gc.collect()
    Cycle()  # suspended on the main thread, closed by the collector on the new one
    native_id = threading.get_native_id

    def collecting() -> int:  # the registration asks for it: where an allocation may collect
        monkeypatch.setattr(threading, "get_native_id", native_id)
        gc.collect()
        return native_id()

    def first_call() -> None:
        monkeypatch.setattr(threading, "get_native_id", collecting)
        assert work() == 3

    in_new_thread(first_call)
    found = {i.name: i for i in trace.invocations()}
    assert found[MODULE + "suspended"].end_ns is not None  # closed by the collector: ended
    assert found[MODULE + "work"].status == "ok"


def test_traced_code_on_a_thread_that_holds_the_recorders_lock_registers_without_waiting(
    trace: Capture,
) -> None:
    """What a finalizer sees when the collector runs inside the recorder's locked bookkeeping
    (the sender's drain, a method's interning): the lock is its own thread's."""

    def under_the_lock() -> None:
        with recorder._lock:
            assert work() == 3
            tracer.traced(lambda: None)()  # interning a method too

    in_new_thread(under_the_lock)
    assert [i.status for i in trace.invocations() if i.name == MODULE + "work"] == ["ok"]


@traced
def closed_by_the_collector(seen: list[str | None]) -> Iterator[int]:
    try:
        yield 1
    finally:
        seen.append(tracer.current_sequence())


class CycleSeeing:
    """Garbage holding a traced generator whose close records the sequence it runs in."""

    def __init__(self, seen: list[str | None]) -> None:
        self.me = self
        self.generator = closed_by_the_collector(seen)
        next(self.generator)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ collects between bytecodes only")
def test_a_generator_the_collector_closes_writes_no_context_value_inside_the_collection(
    trace: Capture,
) -> None:
    """Before 3.12 a collection starts inside an allocation: inside a ContextVar write, say,
    which reads the context's mapping before it allocates and replaces it after. A finalizer
    that writes the same context in between frees that mapping under it (memory corruption:
    more-itertools' suite crashed so, traced, one run in twenty). So the close of a traced
    generator the collector finalizes leaves the context value as it was (its finally sees what
    the code around it sees: no sequence here), and its End is still recorded."""
    gc.collect()
    seen: list[str | None] = []
    CycleSeeing(seen)
    gc.collect()
    assert seen == [None]
    found = {i.name: i for i in trace.invocations()}
    assert found[MODULE + "closed_by_the_collector"].end_ns is not None
    assert tracer.current_sequence() is None


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ collects between bytecodes only")
def test_the_strands_table_is_swept_while_collections_inside_the_sweep_change_it(
    trace: Capture,
) -> None:
    """A sweep of the strands' table allocates as it goes; a collection starting there runs
    finalizers, and a traced generator's close takes its strand out of that table (done here by
    a collector callback, at every collection, as such a finalizer would): the sweep lists the
    table again (it once raised 'dictionary changed size during iteration')."""
    from tracer._core import hooks

    generators = [suspended() for _ in range(50)]
    for generator in generators:
        next(generator)
    taken: list[object] = []

    def closing(phase: str, info: object) -> None:
        if phase == "start" and hooks._strands:
            taken.append(hooks._strands.popitem())

    thresholds = gc.get_threshold()
    gc.callbacks.append(closing)
    gc.set_threshold(1)
    try:
        hooks.sweep()
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(closing)
    assert taken  # collections ran inside the sweep
    for generator in generators:
        generator.close()


@traced
def reporting() -> Iterator[str | None]:
    while True:
        yield tracer.current_sequence()


class Stepping:
    """Garbage whose finalizer steps a traced generator that lives on."""

    def __init__(self, generator: Iterator[str | None], seen: list[str | None]) -> None:
        self.me = self
        self.generator = generator
        self.seen = seen

    def __del__(self) -> None:
        self.seen.append(next(self.generator))


@traced
def collecting_inside_a_root() -> None:
    gc.collect()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ collects between bytecodes only")
def test_a_generator_stepped_inside_a_collection_runs_its_later_steps_in_its_own_sequence(
    trace: Capture,
) -> None:
    """A finalizer that steps a traced generator inside a collection (within a traced root
    here) leaves the context value as it is; once the collection is over, the generator's next
    step runs in its own sequence again, not in the one the finalizer ran in."""
    generator = reporting()
    own = next(generator)
    seen: list[str | None] = []
    gc.collect()
    Stepping(generator, seen)
    collecting_inside_a_root()
    assert len(seen) == 1
    assert next(generator) == own
    assert own is not None


class CycleContinuing:
    """Garbage only the cyclic collector frees, whose finalizer continues a remote sequence (as
    a finalizer making an HTTP call would) and notes what it sees inside."""

    def __init__(self, value: SequenceContext, seen: list[str | None]) -> None:
        self.me = self
        self.value = value
        self.seen = seen

    def __del__(self) -> None:
        with tracer.propagation.continue_with(self.value):
            self.seen.append(tracer.current_sequence())


def test_a_context_a_finalizer_attaches_inside_a_collection_is_written_only_after_311(
    trace: Capture,
) -> None:
    """Every write of the tracer's context value (hand-offs, continuations, the integrations'),
    not only the hot path's, writes nothing while its thread collects before 3.12: a finalizer
    run there interrupts another write of the same context (see the test above). Since 3.12 a
    collection runs between bytecodes, and the value is attached as anywhere else."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    value = tracer.propagation.extract({"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    assert value is not None
    gc.collect()
    seen: list[str | None] = []
    CycleContinuing(value, seen)
    gc.collect()
    assert seen == [None if sys.version_info < (3, 12) else trace_id]
    assert tracer.current_sequence() is None


class CycleWriting:
    """Garbage only the cyclic collector frees, whose finalizer writes a ContextVar through
    ``context.guarded`` (as an integration's coroutine the collector closes resets its own: a
    request being served, a client call) and notes what it reads inside."""

    def __init__(
        self, variable: contextvars.ContextVar[str | None], seen: list[str | None]
    ) -> None:
        self.me = self
        self.variable = variable
        self.write, self.undo = context.guarded(variable)
        self.seen = seen

    def __del__(self) -> None:
        token = self.write("inside")
        try:
            self.seen.append(self.variable.get())
        finally:
            self.undo(token)


def test_an_integrations_context_variable_is_written_only_after_311_in_a_collection() -> None:
    """The integrations' ContextVars (``tracer._patching.integrations``: a request served, a
    client call, a task or job run) follow the tracer's own value's rule (the test above): none
    is written while its thread collects before 3.12, and each is written as usual after."""
    variable: contextvars.ContextVar[str | None] = contextvars.ContextVar("probe", default=None)
    gc.collect()
    seen: list[str | None] = []
    CycleWriting(variable, seen)
    gc.collect()
    assert seen == [None if sys.version_info < (3, 12) else "inside"]
    assert variable.get() is None
    write, undo = context.guarded(variable)
    token = write("outside")  # outside a collection: written on every version
    assert variable.get() == "outside"
    undo(token)
    assert variable.get() is None

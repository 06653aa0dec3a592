"""Traced code that the garbage collector runs: a collection runs finalizers on whichever thread
allocated, at any allocation, also inside the tracer's own bookkeeping. A suspended traced
generator in a reference cycle records its End when the collector closes it; that must neither
deadlock the thread (it once waited for a lock it held itself, and the sender, draining, waited
for it) nor lose an event. Both hot paths run this (the suite runs once with INVOSEQ_PURE=1)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tracer
from tracer import traced
from tracer._core import recorder
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

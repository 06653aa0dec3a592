"""The stack sampler: which threads it samples, how it compresses idle threads, and that it keeps
nothing of the program alive (event loops: test_sampler_loops; its reports, its bounds and its
end: test_sampler_reports)."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from pathlib import Path

import pytest

import tracer
from invoseq import wire
from tests.support import wait_for
from tests.tracer.sampler_support import (  # noqa: F401 -- _sampled: the sampled fixture
    _active_sampler,
    _sampled,
    blocked,
    busy,
    samples_of,
    spin,
    wait_ticks,
)
from tracer import _runtime
from tracer.testing import Capture, capture


def test_a_blocked_thread_costs_a_constant_number_of_records(sampled: Capture) -> None:
    release, entered = threading.Event(), threading.Event()
    thread = threading.Thread(target=blocked, args=(release, entered), name="blocked")
    thread.start()
    assert entered.wait(60)
    wait_ticks(sampled, 300)  # 300+ samples' worth of blocking
    release.set()
    thread.join(60)
    wait_ticks(sampled, 5)
    samples, frames = samples_of(sampled)
    tid = next(t.tid for b in sampled.batches for t in b.threads if t.name == "blocked")
    mine = [s for s in samples if s.tid == tid]
    waiting = [s for s in mine if "wait" in frames[s.frames[-1]]]
    assert sum(s.weight for s in mine) >= 300
    assert len(mine) <= 4  # O(1): the wait collapses into one record, whatever its length
    longest = max(waiting, key=lambda s: s.weight)
    assert longest.weight >= 290
    # Blocked is off the CPU. (A short record at the wait's edges may have run for most of its
    # span: the thread was entering or leaving the wait, and the two clocks tick differently.)
    assert longest.cpu_ns < longest.duration_ns // 10


def kernel_state(thread: threading.Thread) -> str:
    """The thread's state as Linux reports it: R running (or runnable), S sleeping, ..."""
    stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
    return stat.rpartition(")")[2].split()[0]


def test_cpu_mode_samples_only_running_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    release, entered = threading.Event(), threading.Event()
    with capture(sample_interval_ms=1, sample_mode="cpu") as trace:
        sleeper = threading.Thread(target=blocked, args=(release, entered), name="sleeper")
        sleeper.start()
        assert entered.wait(60)
        # Entering its wait and leaving it, the sleeper runs too: only the samples taken while
        # it sleeps for sure count.
        wait_for(lambda: kernel_state(sleeper) in "SD", timeout_s=60)
        asleep_from = time.perf_counter_ns()
        busy(0.3)
        asleep_until = time.perf_counter_ns()
        release.set()
        sleeper.join(60)
        samples, frames = samples_of(trace)
        names = {t.tid: t.name for b in trace.batches for t in b.threads}
    samples = [s for s in samples if asleep_from <= s.t_ns <= asleep_until]
    assert {names[s.tid] for s in samples} == {"MainThread"}
    assert any(frames[s.frames[-1]] == "spin" for s in samples)
    assert trace.batches[-1].sampler is not None
    assert trace.batches[-1].sampler.mode == "cpu"


@tracer.traced
def spin_until(stop: threading.Event, entered: threading.Event) -> None:
    entered.set()
    while not stop.is_set():
        pass


def test_cpu_mode_reads_no_proc_and_samples_a_thread_once_its_clock_advanced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first look at a thread only reads its CPU clock; the next look samples it if the clock
    advanced (the spinner), never if it did not (the sleeper). Nothing is read from /proc."""
    release, slept, stop, spun = (threading.Event() for _ in range(4))
    sleeper = threading.Thread(target=blocked, args=(release, slept), name="sleeper")
    spinner = threading.Thread(target=spin_until, args=(stop, spun), name="spinner")
    with capture(sample_interval_ms=10_000, sample_mode="cpu") as trace:  # ticks by hand
        sleeper.start()
        spinner.start()
        assert slept.wait(60)
        assert spun.wait(60)
        wait_for(lambda: kernel_state(sleeper) in "SD", timeout_s=60)
        real_open = open

        def no_proc(file: object, *args: object, **kwargs: object) -> object:
            assert not str(file).startswith("/proc"), "the sampler read /proc"
            return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr("builtins.open", no_proc)
        runtime_sampler = _active_sampler()
        try:
            runtime_sampler._tick(time.perf_counter_ns())  # the first look at both
            assert spinner.ident not in runtime_sampler._readings.pending
            assert sleeper.ident not in runtime_sampler._readings.pending
            assert spinner.ident is not None
            clock = time.pthread_getcpuclockid(spinner.ident)
            seen = time.clock_gettime_ns(clock)
            wait_for(lambda: time.clock_gettime_ns(clock) > seen, timeout_s=60)
            runtime_sampler._tick(time.perf_counter_ns())
            assert spinner.ident in runtime_sampler._readings.pending
            assert sleeper.ident not in runtime_sampler._readings.pending
        finally:
            monkeypatch.undo()
            stop.set()
            release.set()
            spinner.join(60)
            sleeper.join(60)
    assert trace.batches[-1].sampler is not None
    assert trace.batches[-1].sampler.mode == "cpu"


def test_at_most_max_threads_are_sampled_per_tick() -> None:
    release = threading.Event()
    entered = [threading.Event() for _ in range(20)]
    threads = [
        threading.Thread(target=blocked, args=(release, e), name=f"w{i}")
        for i, e in enumerate(entered)
    ]
    with capture(sample_interval_ms=10_000, max_threads_per_tick=8) as trace:  # ticks by hand
        for thread in threads:
            thread.start()
        for event in entered:
            assert event.wait(60)
        runtime_sampler = _active_sampler()
        for n in range(5):
            runtime_sampler._tick(time.perf_counter_ns())
            assert len(runtime_sampler._readings.pending) <= 8 * (n + 1)
        # (only this test's threads: another test's thread may still be inside a traced call)
        first_tick = set(runtime_sampler._readings.pending) & {thread.ident for thread in threads}
        release.set()
        for thread in threads:
            thread.join(60)
    assert 1 <= len(first_tick) <= 20
    assert trace.batches  # the tracer kept working


def test_only_active_threads_are_sampled_by_default(sampled: Capture) -> None:
    release, entered = threading.Event(), threading.Event()

    def idle_outside_any_traced_call() -> None:
        busy(0)  # records an event, so the thread is known
        entered.set()
        release.wait(60)

    thread = threading.Thread(target=idle_outside_any_traced_call, name="outside")
    thread.start()
    assert entered.wait(60)
    outside_since = time.monotonic_ns()  # a tick during busy(0) may sample it, rightly
    wait_ticks(sampled, 50)
    release.set()
    thread.join(60)
    samples, _ = samples_of(sampled)
    names = {t.tid: t.name for b in sampled.batches for t in b.threads}
    assert "outside" not in {names.get(s.tid) for s in samples if s.t_ns > outside_since}
    assert not {names.get(s.tid, "") for s in samples} & {"invoseq-sender", "invoseq-sampler"}


@tracer.traced
def flush_in_a_traced_call(timeout_s: float) -> None:
    busy_until_sampled()  # the program's own time in it, sampled
    tracer.flush(timeout_s)


def test_a_thread_waiting_in_the_tracers_flush_is_not_sampled(
    sampled: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked child or a task flushes at its end, under a traced frame: the wait is the
    tracer's, not the program's, and no sample shows it as the program's (CI saw a child's
    flush sampled as ``BaseProcess.run -> Condition.wait_for``)."""
    sender = _runtime.RUNTIME.sender
    assert sender is not None
    released = threading.Event()
    receive_acks = sampled.transport.receive_acks

    def withheld(timeout_ms: int) -> list[wire.Ack]:
        if not released.wait(timeout_ms / 1000):
            return []
        return receive_acks(timeout_ms)

    monkeypatch.setattr(sampled.transport, "receive_acks", withheld)
    thread = threading.Thread(target=flush_in_a_traced_call, args=(60,), name="flushing")
    thread.start()
    wait_for(lambda: thread.ident in sender.tracer_work.threads, timeout_s=60)
    sampler = _active_sampler()
    ticks = sampler.ticks
    wait_for(lambda: sampler.ticks >= ticks + 50, timeout_s=60)  # the acks are withheld meanwhile
    released.set()
    thread.join(60)
    wait_ticks(sampled, 5)  # a thread's last sample goes out at a tick after it ended
    samples, frames = samples_of(sampled)
    names = {t.tid: t.name for b in sampled.batches for t in b.threads}
    assert "flushing" in {names.get(s.tid) for s in samples}  # sampled in its traced call
    waits = [
        [frames[f] for f in s.frames]
        for s in samples
        if names.get(s.tid) == "flushing"
        and {"Condition.wait_for", "Condition.wait"} & {frames[f] for f in s.frames}
    ]
    assert waits == []


@tracer.traced
def busy_until_sampled() -> None:
    """Run until the sampler thread has sampled this thread (a fixed time may pass with no tick
    on a loaded machine: CI saw 30 ms go by unsampled), bounded."""
    sampler, ident = _active_sampler(), threading.get_ident()
    deadline = time.monotonic() + 60
    while ident not in sampler._readings.pending and time.monotonic() < deadline:
        spin(0.001)


def test_a_threads_sample_ends_when_it_leaves_traced_calls_not_at_its_next_one(
    sampled: Capture,
) -> None:
    # A worker thread (the sampler thread reads it) leaves a traced call for untraced work, then
    # calls again: the last sample of the first call ends once a tick finds it outside, rather
    # than stretch over the untraced work (and take its CPU) up to the next call's first sample.
    spans: list[tuple[int, int]] = []

    def in_and_out() -> None:
        for seconds in (0.3, 0):
            started = time.perf_counter_ns()
            busy_until_sampled()
            spans.append((started, time.perf_counter_ns()))
            spin(seconds)  # untraced

    thread = threading.Thread(target=in_and_out, name="in-and-out")
    thread.start()
    thread.join(60)
    wait_ticks(sampled, 5)
    samples, _ = samples_of(sampled)
    names = {t.tid: t.name for b in sampled.batches for t in b.threads}
    mine = [s for s in samples if names.get(s.tid) == "in-and-out"]
    (first_start, first_end), (second_start, _) = spans
    in_first = [s for s in mine if first_start <= s.t_ns < first_end]
    assert in_first, "the sampler never saw the first call"
    last = max(in_first, key=lambda s: s.t_ns)
    untraced = second_start - first_end  # 0.3 s of it
    # Without the end, the span reached to the middle of the untraced work.
    assert last.t_ns + last.duration_ns - first_end < untraced // 10
    assert last.cpu_ns < untraced // 10


class Payload:
    """An object of the traced program, held only by a local variable."""


@tracer.traced
def hold_a_payload(
    refs: list[weakref.ref[Payload]], entered: threading.Event, release: threading.Event
) -> None:
    payload = Payload()
    refs.append(weakref.ref(payload))
    entered.set()
    release.wait(60)


def test_sampling_keeps_no_object_of_the_program_alive(sampled: Capture) -> None:
    """The frames the sampler reads are freed by reference counting, never left in a cycle for
    the garbage collector: the program's locals die when their function returns, in the order
    the program expects (a cycle freed them in any order, which crashed CPython 3.12 in
    multiprocessing, python/cpython#111331)."""
    refs: list[weakref.ref[Payload]] = []
    entered, release = threading.Event(), threading.Event()
    gc.disable()
    try:
        thread = threading.Thread(target=hold_a_payload, args=(refs, entered, release))
        thread.start()
        assert entered.wait(60)
        wait_ticks(sampled, 20)  # sampled while it holds the payload
        release.set()
        thread.join(60)
        wait_ticks(sampled, 5)
        assert refs[0]() is None, "a sampled frame kept the payload alive"
    finally:
        gc.enable()

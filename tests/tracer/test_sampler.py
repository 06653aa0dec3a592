"""The stack sampler: what it samples, how it compresses idle threads, and what it reports."""

from __future__ import annotations

import asyncio
import gc
import os
import selectors
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import tracer
from invoseq import wire
from tests.support import wait_for
from tracer import _runtime
from tracer._sampling import active, stacks
from tracer._sampling import output as output_module
from tracer._sampling import readings as readings_module
from tracer._sampling import sampler as sampler_module
from tracer.testing import Capture, capture


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@tracer.traced
def blocked(release: threading.Event, entered: threading.Event) -> None:
    entered.set()
    release.wait(60)


@tracer.traced
def busy(seconds: float) -> None:
    spin(seconds)


def samples_of(trace: Capture) -> tuple[list[wire.Sample], dict[int, str]]:
    """The threads' samples sent so far (the sampler's gaps left out: a loaded machine may
    keep the sampler off the CPU for a few intervals), and the frames' names."""
    trace.flush()
    frames = {f.frame: f.function for b in trace.batches for f in b.frames}
    samples = [s for b in trace.batches for s in b.samples]
    return [s for s in samples if s.tid != wire.GAP_TID], frames


@pytest.fixture(name="sampled")
def _sampled() -> Iterator[Capture]:
    with capture(sample_interval_ms=1) as trace:
        yield trace


def wait_ticks(trace: Capture, ticks: int) -> None:
    """Let the sampler take at least ``ticks`` more ticks, or go idle (no thread is inside a
    traced call: it emitted every pending sample and ticks no more until one is), bounded."""
    deadline = time.monotonic() + 60
    trace.flush()  # count from the sampler's latest report, not one sent before the caller's step
    start = _ticks(trace)
    while _ticks(trace) < start + ticks and not _idle():
        assert time.monotonic() < deadline, "the sampler stopped ticking"
        trace.flush()
    trace.flush()  # what it emitted before going idle


def _idle() -> bool:
    """Parked and not yet woken: a thread that entered a traced call since has set the wake-up,
    and the sampler thread may simply not have run yet (CI saw it leave the wait at one tick)."""
    sender = _runtime.RUNTIME.sender
    sampler = sender._sampler if sender is not None else None
    return sampler is not None and sampler.parked and not sampler._wakeup.is_set()


def _ticks(trace: Capture) -> int:
    reports = [b.sampler for b in trace.batches if b.sampler is not None]
    return reports[-1].ticks if reports else 0


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


def _active_sampler() -> sampler_module.Sampler:
    from tracer import _runtime as runtime

    assert runtime.RUNTIME.sender is not None
    found = runtime.RUNTIME.sender._sampler
    assert found is not None
    return found


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


class _Watched(selectors.DefaultSelector):
    """A selector that asks, each time the loop waits in it, whether the sampler would sample
    the loop's thread there, and files the answer under the test's current ``phase``."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "starting"
        self.answers: dict[str, list[bool]] = {}

    def select(self, timeout: float | None = None) -> list[Any]:
        answer = active.worth_sampling(sys._getframe())
        self.answers.setdefault(self.phase, []).append(answer)
        return super().select(timeout)


def test_an_event_loop_waiting_is_sampled_while_a_traced_task_is_suspended_and_not_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the steps of its tasks no traced frame is on the loop's stack (a suspended
    coroutine leaves none), yet the repository can tell the loop's time there from the tasks'
    (cmr/views/samples/placement.py): while a traced coroutine is suspended, the loop's wait is
    sampled. Once nothing traced is left in its tasks, the loop's wait is not (an idle server lets
    the sampler rest). A step of an untraced task is not sampled; a step of a traced one is."""
    monkeypatch.setattr(active, "VERDICT_NS", 0)  # each wait asks afresh
    seen: dict[str, bool] = {}
    selector = _Watched()

    @tracer.traced
    async def traced_task() -> None:
        seen["traced step"] = active.worth_sampling(sys._getframe())
        selector.phase = "a traced task suspended"
        await asyncio.sleep(0.02)
        selector.phase = "its last step"  # (the gather's own wake-up comes after it)

    async def untraced_task() -> None:
        seen["untraced step"] = active.worth_sampling(sys._getframe())
        await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(traced_task(), untraced_task())
        selector.phase = "nothing traced left"
        await asyncio.sleep(0.02)

    loop = asyncio.SelectorEventLoop(selector)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    suspended = selector.answers["a traced task suspended"]
    assert suspended
    assert all(suspended), selector.answers
    after = selector.answers["nothing traced left"]
    assert after
    assert not any(after), selector.answers
    assert seen == {"traced step": True, "untraced step": False}
    assert not active.worth_sampling(sys._getframe())  # no loop here, no traced call


def test_an_event_loop_serving_a_measured_request_is_sampled_and_its_service_alone_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request an integration measures (``measured.begin``) keeps its loop's wait sampled until
    it finishes; a service invocation (an ASGI lifespan, open for the server's life) does not."""
    from tracer._core import measured, service

    monkeypatch.setattr(active, "VERDICT_NS", 0)
    selector = _Watched()

    async def main() -> None:
        with capture():
            lifespan = service.begin("asgi.lifespan")
            assert lifespan is not None
            selector.phase = "service only"
            await asyncio.sleep(0.01)
            request = measured.begin()
            assert request is not None
            selector.phase = "a request in flight"
            await asyncio.sleep(0.01)
            request.finish(measured.method("test", "GET /"))
            selector.phase = "request finished"
            await asyncio.sleep(0.01)
            service.finish(lifespan, "asgi.lifespan")

    loop = asyncio.SelectorEventLoop(selector)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert selector.answers["a request in flight"]
    assert all(selector.answers["a request in flight"]), selector.answers
    for idle in ("service only", "request finished"):
        assert selector.answers[idle]
        assert not any(selector.answers[idle]), selector.answers


def test_a_loop_iterating_in_c_is_sampled_while_it_waits_not_in_an_untraced_step() -> None:
    """uvloop runs its iteration in C: while it waits, the innermost frame of its thread is
    ``asyncio.Runner.run`` (``uvloop.run``), and that is the loop, worth sampling while a traced
    task is suspended; a step of an untraced task, above it, is not; a step of a traced one
    is."""
    uvloop = pytest.importorskip("uvloop")
    seen: dict[str, bool] = {}
    waiting = threading.Event()
    release = threading.Event()

    @tracer.traced
    async def traced_task() -> None:
        seen["traced step"] = active.worth_sampling(sys._getframe())
        while not release.is_set():  # suspended: the loop's wait serves it
            await asyncio.sleep(0.005)

    async def untraced_task() -> None:
        seen["untraced step"] = active.worth_sampling(sys._getframe())
        waiting.set()
        while not release.is_set():  # the loop waits in C between these steps
            await asyncio.sleep(0.005)

    async def main() -> None:
        await asyncio.gather(traced_task(), untraced_task())

    thread = threading.Thread(target=uvloop.run, args=(main(),), name="uvloop")
    thread.start()
    try:
        assert waiting.wait(30), "the loop never ran its tasks"

        def top_in_runner() -> FrameType | None:
            top = sys._current_frames().get(thread.ident or 0)
            if (
                top is not None
                and top.f_code.co_name == "run"
                and "runners" in top.f_code.co_filename
            ):
                return top
            return None

        top = wait_for(top_in_runner, timeout_s=30, interval_s=0.001)
        assert active.worth_sampling(top)
    finally:
        release.set()
        thread.join(30)
    assert not thread.is_alive()
    assert seen == {"traced step": True, "untraced step": False}


def test_a_tick_that_came_late_is_counted_and_a_long_gap_is_sent_as_the_samplers() -> None:
    """A tick is late past one interval; past ``GAP_INTERVALS`` the span no thread was read in
    goes out as a gap (a frameless sample of ``GAP_TID``), with the ticks it missed."""
    sampler = sampler_module.Sampler(
        interval_ms=1, mode="wall", only_active=True, max_threads_per_tick=8, exclude=set
    )
    ms = 1_000_000
    sampler._late(due=10 * ms, started=10 * ms + ms // 2, interval=ms)  # on time
    sampler._late(due=20 * ms, started=22 * ms, interval=ms)  # late, no gap
    sampler._late(due=30 * ms, started=36 * ms + 1, interval=ms)  # a gap of 6 ms
    assert sampler.late_ticks == 2
    assert sampler.drain() == [(wire.GAP_TID, 30 * ms, 6, 6 * ms + 1, 0, (), (), None, None)]


def test_without_thread_cpu_clocks_cpu_mode_says_so_once_and_samples_wall_time(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sampler_module, "cpu_clock", lambda ident: None)
    monkeypatch.setattr(readings_module, "cpu_clock", lambda ident: None)
    with capture(sample_interval_ms=5, sample_mode="cpu") as trace:
        busy(0.05)
        trace.flush()
    assert caplog.text.count("threads have no CPU clock here") == 1
    reports = [b.sampler for b in trace.batches if b.sampler is not None]
    assert reports[-1].mode == "wall"


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


@tracer.traced
def busy_until(stop: threading.Event, entered: threading.Event | None = None) -> None:
    if entered is not None:
        entered.set()
    while not stop.is_set():
        spin(0.001)


def test_the_sampler_reports_its_ticks_and_cost_and_frames_are_interned(
    sampled: Capture,
) -> None:
    stop, entered = threading.Event(), threading.Event()
    spinner = threading.Thread(target=busy_until, args=(stop, entered), name="spinner")
    spinner.start()
    try:
        assert entered.wait(60)  # inside a traced call: the sampler ticks until it leaves
        wait_ticks(sampled, 20)  # every one of them while the spinner spins
    finally:
        stop.set()
        spinner.join(60)
    report = sampled.batches[-1].sampler
    assert report is not None
    assert (report.mode, report.interval_ms) == ("wall", 1)
    assert report.ticks >= 20
    assert report.cost_ns > 0
    assert report.late_ticks <= report.ticks
    frames = [f for b in sampled.batches for f in b.frames]
    assert len({f.frame for f in frames}) == len(frames)  # each sent once
    samples, names = samples_of(sampled)
    package = os.path.dirname(os.path.abspath(tracer.__file__)) + os.sep
    assert package == stacks.TRACER_DIR  # the whole package, not the sampler's folder
    assert not [f for f in frames if f.file.startswith(package)]  # the tracer's own: left out
    assert any(names[s.frames[-1]] == "spin" for s in samples)


def test_samples_refused_past_the_queue_bound_are_counted_in_the_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sampler's queue to the sender holds MAX_PENDING_SAMPLES; at 0 it refuses every one.
    monkeypatch.setattr(output_module, "MAX_PENDING_SAMPLES", 0)
    with capture(sample_interval_ms=1) as trace:
        stop, entered = threading.Event(), threading.Event()
        spinner = threading.Thread(target=busy_until, args=(stop, entered), name="spinner")
        spinner.start()
        try:
            assert entered.wait(60)
            wait_ticks(trace, 20)
        finally:
            stop.set()
            spinner.join(60)
        trace.flush()
    report = trace.batches[-1].sampler
    assert report is not None
    assert not [s for b in trace.batches for s in b.samples if s.tid != wire.GAP_TID]
    assert report.dropped_samples > 0  # every finished sample of the spinner: refused, counted


def test_sampling_can_be_turned_off() -> None:
    with capture(sample_interval_ms=0) as trace:
        busy(0.05)
        trace.flush()
    assert all(b.sampler is None and not b.samples for b in trace.batches)
    assert not [t for t in threading.enumerate() if t.name == "invoseq-sampler"]


def test_a_tick_in_progress_ends_before_shutdown_returns_even_with_no_flush_timeout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ticking = threading.Event()
    original = sampler_module.Sampler._tick

    def slow_tick(self: sampler_module.Sampler, now: int) -> None:
        original(self, now)
        if not ticking.is_set():  # the first tick goes on past the start of the shutdown
            ticking.set()
            assert self._stop.wait(30)
            for _ in range(2_000_000):  # then some more work (well within the grace), by count
                pass

    monkeypatch.setattr(sampler_module.Sampler, "_tick", slow_tick)
    tracer.configure(endpoint=f"ipc://{tmp_path}/nobody", sample_interval_ms=1, flush_timeout_ms=0)
    busy(0.01)  # the first traced call starts the sender and the sampler
    assert ticking.wait(30)
    tracer.shutdown()
    assert not [t for t in threading.enumerate() if t.name == "invoseq-sampler"]

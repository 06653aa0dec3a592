"""The stack sampler's reports, bounds and end: its ticks, cost, late ticks and gaps, the
samples its queue refused, wall time where threads have no CPU clock, turned off, and a tick in
progress ended before shutdown returns."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import tracer
from invoseq import wire
from tests.tracer.sampler_support import (  # noqa: F401 -- _sampled: the sampled fixture
    _sampled,
    busy,
    samples_of,
    spin,
    wait_ticks,
)
from tracer._sampling import output as output_module
from tracer._sampling import readings as readings_module
from tracer._sampling import sampler as sampler_module
from tracer._sampling import stacks
from tracer.testing import Capture, capture


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

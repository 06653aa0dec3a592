"""What the stack sampler's tests share (test_sampler, test_sampler_reports): traced functions
that block or spin, the samples a capture received, a capture that samples every millisecond
(the ``sampled`` fixture), waiting for the sampler's ticks, and the sampler the runtime started."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import tracer
from invoseq import wire
from tracer import _runtime
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


def _active_sampler() -> sampler_module.Sampler:
    from tracer import _runtime as runtime

    assert runtime.RUNTIME.sender is not None
    found = runtime.RUNTIME.sender._sampler
    assert found is not None
    return found

"""An idle traced process costs nothing (issue 33): while no thread is inside a traced call the
sampler does not tick and the sender wakes only for its heartbeats; the next traced call wakes
both. Counted between events (heartbeats, calls), never timed."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import tracer
from tests.support import wait_for
from tracer import _runtime
from tracer._core import recorder
from tracer._sampling.sampler import Sampler
from tracer._shipping.sender import IDLE_HEARTBEATS, Sender
from tracer.testing import Capture, capture

#: The heartbeat of these tests: short, so that a few come within the bounded waits.
HEARTBEAT_MS = 100


@tracer.traced
def work(n: int) -> int:
    return sum(step(i) for i in range(n))


@tracer.traced
def step(i: int) -> int:
    return i * 2


@pytest.fixture(name="idle")
def _idle() -> Iterator[Capture]:
    with capture(sample_interval_ms=1, heartbeat_ms=HEARTBEAT_MS) as trace:
        yield trace


def parts() -> tuple[Sender, Sampler]:
    sender = _runtime.RUNTIME.sender
    assert sender is not None
    assert sender._sampler is not None
    return sender, sender._sampler


def heartbeats(trace: Capture) -> int:
    """Batches that carried no events and no samples: heartbeats."""
    return sum(1 for b in trace.batches if not b.chunks and not b.samples and not b.final)


def go_idle() -> tuple[Sender, Sampler]:
    sender, sampler = parts()
    wait_for(lambda: sampler.parked and sender.parked, timeout_s=60)
    return sender, sampler


def test_an_idle_process_ticks_no_sampler_and_wakes_its_sender_only_for_heartbeats(
    idle: Capture,
) -> None:
    assert work(10) == 90
    sender, sampler = go_idle()
    ticks, rounds, beats = sampler.ticks, sender.rounds, heartbeats(idle)
    # Three heartbeats later (the repository hears from the process: it is not lost) ...
    wait_for(lambda: heartbeats(idle) >= beats + 3, timeout_s=60)
    wait_for(lambda: sender.parked, timeout_s=60)
    # ... the sampler has not ticked, and the sender woke for little more than the heartbeats
    # (one round sends it, at most one more sees its acknowledgement).
    assert sampler.ticks == ticks
    assert sampler.parked
    assert sender.rounds - rounds <= 2 * (heartbeats(idle) - beats) + 2


def test_the_next_traced_call_wakes_the_sampler(idle: Capture) -> None:
    assert work(3) == 6
    _sender, sampler = go_idle()
    ticks, parks = sampler.ticks, sampler.parks
    release, entered = threading.Event(), threading.Event()

    @tracer.traced
    def blocked() -> None:
        entered.set()
        release.wait(60)

    thread = threading.Thread(target=blocked)
    thread.start()
    try:
        assert entered.wait(60)
        # Inside a traced call: the sampler ticks again, and stays awake while it lasts.
        wait_for(lambda: sampler.ticks >= ticks + 20, timeout_s=60)
        assert sampler.parks == parks
    finally:
        release.set()
        thread.join(60)
    idle.flush()
    assert "blocked" in {inv.name.rpartition(".")[2] for inv in idle.invocations()}
    go_idle()  # and idle again once it returned


def test_an_idle_sender_keeps_no_memory_for_batch_bodies(idle: Capture) -> None:
    assert work(2_000) == 3_998_000
    idle.flush()
    sender, _sampler = go_idle()
    assert sender._bodies.kept_bytes() == 0


def test_a_thread_left_inside_a_traced_call_keeps_the_sampler_awake(idle: Capture) -> None:
    release, entered = threading.Event(), threading.Event()

    @tracer.traced
    def blocked() -> None:
        entered.set()
        release.wait(60)

    thread = threading.Thread(target=blocked)
    thread.start()
    try:
        assert entered.wait(60)
        _sender, sampler = parts()
        # Its allowance handed back (it records nothing while it waits): what lets the sampler go
        # idle in a process with no call in flight ...
        wait_for(recorder.all_spent, timeout_s=60)
        # ... but the thread is inside a traced call: the sampler keeps ticking.
        ticks = sampler.ticks
        wait_for(lambda: sampler.ticks >= ticks + 10, timeout_s=60)
        assert not sampler.parked
    finally:
        release.set()
        thread.join(60)


def test_idle_heartbeats_promise_a_longer_silence_and_work_the_usual_one_again(
    idle: Capture,
) -> None:
    """The repository keeps the latest batch's promise (docs/protocol.md): an idle process that
    dies is taken for lost later, but it had nothing in flight; the first batch after it works
    again promises the usual interval."""
    assert work(3) == 6
    go_idle()
    beats = heartbeats(idle)
    wait_for(lambda: heartbeats(idle) >= beats + 2, timeout_s=60)
    last = [b for b in idle.batches if not b.chunks and not b.samples][-1]
    assert last.process.heartbeat_ms == IDLE_HEARTBEATS * HEARTBEAT_MS
    sent = len(idle.batches)
    assert work(3) == 6
    wait_for(lambda: any(b.chunks for b in idle.batches[sent:]), timeout_s=60)
    first = next(b for b in idle.batches[sent:] if b.chunks)
    assert first.process.heartbeat_ms == HEARTBEAT_MS

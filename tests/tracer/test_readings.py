"""A reader's samples in the making (tracer/_sampling/readings.py): where one sample's span ends and
the next begins, and when each sample's first and last ticks saw its stack, with the thread's CPU
clock given by the test."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from tests.support import wait_for
from tracer._sampling.readings import Pending, Readings, cpu_clock

MS = 1_000_000
SPIN = ((1, 2), (10, 20))
SLEEP = ((1, 3), (10, 30))
TIDY = ((1, 4), (10, 40))


class Clocked(Readings):
    """Readings of one thread whose CPU clock reads ``cpu``."""

    __slots__ = ("cpu", "credited", "emitted")

    def __init__(self) -> None:
        self.emitted: list[tuple[Pending, int | None]] = []
        self.credited: list[int | None] = []  # the CPU time each emitted sample was given
        super().__init__(self._record)
        self.cpu: int | None = 0

    def _record(self, sample: Pending, end: int | None, cpu: int | None) -> None:
        self.emitted.append((sample, end))
        self.credited.append(cpu)

    def cpu_now(self, ident: int) -> int | None:
        return self.cpu


def test_a_collapsed_wait_keeps_its_first_and_last_ticks() -> None:
    readings = Clocked()
    for k in range(5):  # ticks at 10, 20, ... 50 ms, no CPU used: one sample of weight 5
        readings.sample(1, 1, SLEEP, (k + 1) * 10 * MS)
    readings.cpu = 2 * MS
    readings.sample(1, 1, TIDY, 60 * MS)
    [(wait, end)] = readings.emitted
    assert (wait.weight, wait.first_ns, wait.last_ns) == (5, 10 * MS, 50 * MS)
    assert end == 58 * MS  # it woke 2 ms (of CPU) before the next tick saw it elsewhere


def test_a_main_thread_that_answers_late_was_where_it_is_since_it_was_asked() -> None:
    """Seen spinning (answering at once) on a loaded machine that gave it a third of the CPU,
    then answering 90 ms late from a sleep it was asked about at 24 ms: the spin's span ends by
    24 ms, not where the CPU clock alone would put it, and the sleep's first tick is then."""
    readings = Clocked()
    readings.sample(1, 1, SPIN, 10 * MS, running=True)
    readings.cpu = 3 * MS
    readings.sample(1, 1, SPIN, 19 * MS, running=True)  # 3 ms of CPU in 9: still running
    readings.cpu = 4 * MS
    readings.sample(1, 1, SLEEP, 110 * MS, weight=10, since=24 * MS)
    [_first, (spin, end)] = readings.emitted
    assert spin.frames == SPIN[0]
    assert end is not None
    assert 19 * MS <= end <= 24 * MS
    sleep = readings.pending[1]
    assert (sleep.start_ns, sleep.first_ns, sleep.last_ns) == (end, 24 * MS, 110 * MS)


def test_stopping_ends_a_sample_with_the_cpu_its_thread_used_since_its_last_tick() -> None:
    """The program's last traced call ran 6 ms (of CPU) after the last tick saw it, and the
    sampler stopped (the program exits): the spin keeps those 6 ms rather than lose them (CI saw
    a 300 ms spin come out 35 ms short in CPU mode)."""
    readings = Clocked()
    readings.sample(1, 1, SPIN, 10 * MS, running=True)
    readings.cpu = 6 * MS
    readings.finish(16 * MS, 10 * MS)
    assert readings.emitted == [(readings.emitted[0][0], 16 * MS)]
    assert readings.credited == [6 * MS]
    assert readings.pending == {}


def test_stopping_long_after_the_last_tick_extends_a_sample_one_interval_at_most() -> None:
    """Stopped 90 ms after its last tick (its thread did other things since, 50 ms of CPU): the
    sample lasts no longer than a tick would have taken to see it again, with no more CPU."""
    readings = Clocked()
    readings.sample(1, 1, SPIN, 10 * MS, running=True)
    readings.cpu = 50 * MS
    readings.finish(100 * MS, 10 * MS)
    [(spin, end)] = readings.emitted
    assert (spin.frames, end, readings.credited) == (SPIN[0], 20 * MS, [10 * MS])


def test_stopping_after_a_thread_ended_lasts_its_sample_one_interval() -> None:
    readings = Clocked()
    readings.sample(1, 1, SPIN, 10 * MS, running=True)
    readings.cpu = None  # its clock is gone with it
    readings.finish(16 * MS, 10 * MS)
    [(_spin, end)] = readings.emitted
    assert end is None  # the sampler's emit makes it one interval past the last instant


def test_a_threads_cpu_clock_is_read_from_its_kernel_id_and_is_gone_when_it_ends() -> None:
    """The clock a thread's kernel id makes is the one ``pthread_getcpuclockid`` gives while the
    thread lives; once it has ended, reading it says the thread is gone (None), never raises, and
    the thread's descriptor is never read again (it may be freed memory by then): its sample in
    the making ends one interval past its last tick when the sampler stops (CI saw a process
    crash there, asking ``pthread_getcpuclockid`` for such a thread's clock)."""
    if sys.platform != "linux":
        pytest.skip("per-thread CPU clocks are Linux's")
    started, release = threading.Event(), threading.Event()
    natives: list[int] = []

    def body() -> None:
        natives.append(threading.get_native_id())
        started.set()
        release.wait(60)

    emitted: list[tuple[Pending, int | None]] = []
    readings = Readings(lambda sample, end, cpu: emitted.append((sample, end)))
    thread = threading.Thread(target=body)
    thread.start()
    try:
        assert started.wait(60)
        ident = thread.ident
        assert ident is not None
        assert cpu_clock(natives[0]) == time.pthread_getcpuclockid(ident)
        assert readings.cpu_now(ident) is None  # never watched: nothing is read
        readings.watch(ident, natives[0])
        assert isinstance(readings.cpu_now(ident), int)
        readings.sample(ident, 1, SLEEP, 10 * MS)
    finally:
        release.set()
        thread.join(60)
    # The kernel's thread outlives the Python thread's end by a moment.
    wait_for(lambda: not os.path.exists(f"/proc/self/task/{natives[0]}"), timeout_s=60)
    readings.sample(ident, 1, TIDY, 20 * MS)  # a tick that lost the race with its end
    assert readings.cpu_now(ident) is None
    readings.finish(30 * MS, 10 * MS)
    assert [(sample.frames, end) for sample, end in emitted] == [(SLEEP[0], None)]
    readings.watch(ident, natives[0])  # seen again by the same id: not made again
    assert readings.cpu_now(ident) is None
    readings.watch(ident, threading.get_native_id())  # the ident taken by another thread
    assert isinstance(readings.cpu_now(ident), int)

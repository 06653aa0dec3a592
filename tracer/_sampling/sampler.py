"""The stack sampler: a daemon thread that periodically records the stacks of the traced threads.

Instrumenting every function costs too much, so the tree stops at the last traced call; samples
fill in what ran below it (the repository merges them in as *estimated* nodes). The main thread
samples itself where it can: ``main_thread``, a part of ``Sampler``.

More in docs/architecture.md, "tracer/_sampling/sampler.py".
"""

from __future__ import annotations

import gc
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

from invoseq import wire
from tracer._core import accel, context, recorder
from tracer._sampling.active import (
    MAX_COLLECTED,
    in_event_loop,
    open_async_work,
    worth_sampling,
)
from tracer._sampling.c_helpers import _gil_turn
from tracer._sampling.main_thread import MainThreadTicks
from tracer._sampling.output import SampleQueue, SampleTuple, record_of
from tracer._sampling.pacing import Pacer
from tracer._sampling.readings import Pending, Readings, cpu_clock
from tracer._sampling.stacks import stack_of

log = logging.getLogger("tracer")

#: While only the main thread records (and samples itself), the sampler thread ticks this many
#: times less often: it only looks for other threads then, and each of its ticks takes the GIL
#: from the main thread (which, waiting, had that wait credited to the stack it resumed in: one
#: of two asyncio tasks was estimated 13 % long for it).
MAIN_ONLY_SPACING: Final = 10

#: A tick this many intervals late leaves a gap (``Sampler._late``), sent as a sample of
#: ``wire.GAP_TID``.
GAP_INTERVALS: Final = 4

#: How long stopping waits for the sampler thread beyond the caller's timeout.
STOP_GRACE_S: Final = 1.0


#: The C accelerator's ``hold_stacks`` (None: pure Python).
_hold_stacks: Callable[[dict[int, FrameType], int], list[FrameType]] | None = (
    None if accel.speedups is None else accel.speedups.hold_stacks
)

if sys.version_info < (3, 12):

    def current_frames() -> tuple[dict[int, FrameType], list[FrameType]]:
        """``sys._current_frames()`` with the cyclic collector held off, and, with the C
        accelerator, every frame of the other threads' stacks made as a frame object in the same
        step and held for the tick. On 3.11 (before 3.11.9) a collection that starts inside
        ``sys._current_frames()`` runs finalizers while it holds the runtime's list of threads;
        one that lets the GIL go (a socket's close, a lock, a join) lets another thread take the
        GIL and wait for that list to start or end a thread: the process hangs
        (python/cpython#106883, seen in this project's tests). And a stack walk that makes
        another thread's frame objects later (``f_back``) allocates: a collection that starts
        there may run a finalizer that lets the GIL go, and that thread may return from the very
        frame being made, which is then written after it is gone (the samplers of Sentry and
        Datadog crashed so on 3.11: getsentry/sentry-python#6119, DataDog/dd-trace-py#13567).
        With the frames held, the walks after meet frame objects made already and allocate
        none. 3.12 runs collections only between bytecodes. A program that turned the collector
        off keeps it off."""
        enabled = gc.isenabled()
        if enabled:
            gc.disable()
        try:
            frames = sys._current_frames()
            held = [] if _hold_stacks is None else _hold_stacks(frames, MAX_COLLECTED)
            return frames, held
        finally:
            if enabled:
                gc.enable()

else:

    def current_frames() -> tuple[dict[int, FrameType], list[FrameType]]:
        return sys._current_frames(), []


class Sampler(MainThreadTicks):
    """The sampler thread (``_run``): it ticks, reads the other threads (``_tick``), and rests
    while no thread is in a traced call (``_park``); the main thread samples itself
    (``MainThreadTicks``)."""

    def __init__(
        self,
        *,
        interval_ms: int,
        mode: str,
        only_active: bool,
        max_threads_per_tick: int,
        exclude: Callable[[], set[int]],
        paced: bool = True,
    ) -> None:
        self.interval_ns = interval_ms * 1_000_000
        self._paced = paced
        self.mode = mode
        self._only_active = only_active
        self._max_threads = max_threads_per_tick
        self._exclude = exclude  # idents of the tracer's own threads
        self._random = random.Random(os.urandom(16))
        self._readings = Readings(self._emit)  # the sampler thread's
        self._main_readings = Readings(self._emit)  # the main thread's own (``_main_tick``)
        self._output = SampleQueue()
        self.ticks = 0
        self.late_ticks = 0
        self.cost_ns = 0
        self._pacer = Pacer(self.interval_ns, time.perf_counter_ns(), enabled=paced)
        self._stop = threading.Event()
        # The sampler thread's wait between ticks: one that ends holding the GIL, or the event's.
        self._turn: Any = _gil_turn.Turn() if _gil_turn is not None else None
        # Held by the main thread's ticks, and by the sampler thread only when it finishes: a
        # main tick never waits for the sampler thread (which may hold the GIL's turn for long).
        self._main_lock = threading.Lock()
        self._pid = os.getpid()
        self._main_ident = threading.main_thread().ident or 0
        # CPU the main thread's own ticks used: written by the main thread only, and the part
        # the sampler thread has counted, by it only (no update lost between the two).
        self._main_cpu_ns = 0
        self._main_cpu_counted = 0
        self._ticks: Any = None  # a _main_ticks.Ticks while the main thread samples itself
        # Idle (docs/architecture.md, "Idle"): the main thread's last tick found it outside any
        # traced call (written by the main thread only), and the sampler thread waits for work.
        self._main_busy = False
        self.parked = False
        self._wakeup = threading.Event()
        self.parks = 0  # times it went idle (tests)
        self._thread = threading.Thread(target=self._run, name="invoseq-sampler", daemon=True)

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def start(self) -> None:
        if self.mode == "cpu" and cpu_clock(threading.get_native_id()) is None:
            log.warning(
                "invoseq: threads have no CPU clock here (Linux has them); "
                "the sampler uses wall mode"
            )
            self.mode = "wall"
        self._start_ticks(self.interval_ns)
        with context.detached():  # never part of a sequence (see Sender.start)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop and wait for the thread: ``timeout_s`` and a grace of its own, as the sender
        does. Waking it is local and a tick is short, but a flush timeout of 0 must not leave it
        running after shutdown (CI saw it when the machine kept it off the CPU)."""
        self._stop.set()
        self._wakeup.set()
        if self._turn is not None:
            self._turn.stop()
        if self._ticks is not None:
            self._ticks.stop()
        if self._thread.is_alive():
            self._thread.join(timeout_s + STOP_GRACE_S)

    def wake(self) -> None:
        """A thread reserved allowance for a Start (``budget.on_reserved``): if the sampler waits
        for work, it ticks again. Cheap when it does not: reservations are rare."""
        if self.parked:
            self._wakeup.set()

    def _park(self, busy: bool) -> bool:
        """Wait for work when no thread is inside a traced call (``busy``: the tick sampled one,
        or the main thread's last tick did) and every thread has spent its allowance: the next
        traced call of any thread reserves more, and ``wake`` ends the wait (no tick meanwhile,
        of either thread). True when it waited (and was woken); False when it did not."""
        if busy or self._main_busy or self._main_readings.pending:
            return False
        if self._anyone_inside():
            return False
        self._wakeup.clear()
        self.parked = True  # from here a reservation wakes it: none is missed
        try:
            if not recorder.all_spent() or self._stop.is_set():
                return False
            ticks, self._ticks = self._ticks, None
            if ticks is not None:
                ticks.stop()  # the main thread is asked nothing while it waits
            if self._turn is not None:  # nor is the GIL's holder (its nudger ends)
                self._turn.stop()
                self._turn = _gil_turn.Turn() if _gil_turn is not None else None
            self.parks += 1
            self._wakeup.wait()
        finally:
            self.parked = False
        if not self._stop.is_set():
            self._start_ticks(self._pacer.interval_ns)
        return True

    def _anyone_inside(self) -> bool:
        """Whether a recording thread is inside a traced call or runs an asyncio event loop (its
        tasks may be suspended in traced coroutines), the main thread included: looked at only
        before going idle."""
        if recorder.threads_in_c_calls():
            return True
        threads = recorder.sampled_threads()
        if not threads:
            return False
        frames, _held = current_frames()  # _held: made in one step, kept till the return
        del frames[threading.get_ident()]  # no cycle through this frame (see _tick)
        excluded = self._exclude()
        inside = any(
            worth_sampling(top) or (in_event_loop(top) and open_async_work())
            for ident, top in frames.items()
            if ident in threads and ident not in excluded
        )
        frames.clear()
        return inside

    def drain(self) -> list[SampleTuple]:
        return self._output.drain()

    def report(self) -> tuple[str, int, int, int, int, int, int, int]:
        """As invoseq.wire.SamplerReport: mode, configured interval, ticks, late ticks, cost, the
        interval in effect, the longest used, and the samples dropped (its queue was full)."""
        interval_ms = self.interval_ns // 1_000_000
        pacer = self._pacer
        return (
            self.mode,
            interval_ms,
            self.ticks,
            self.late_ticks,
            self.cost_ns,
            pacer.interval_ns,
            pacer.longest_ns,
            self._output.dropped,
        )

    # -- the sampler thread -----------------------------------------------------------------------

    def _next_interval(self) -> int:
        """One interval, jittered (0.5 to 1.5 times): ticks never fall into step with periodic
        work, which would hide whatever runs at the moments they keep missing."""
        interval = self._pacer.interval_ns
        return interval // 2 + self._random.randrange(interval + 1)

    def _run(self) -> None:
        pacer = self._pacer = Pacer(self.interval_ns, time.perf_counter_ns(), enabled=self._paced)
        due = time.perf_counter_ns() + self._next_interval()
        try:
            while not self._wait(max(0, due - time.perf_counter_ns())):
                started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
                self._late(due, started, pacer.interval_ns)
                main_cpu, spacing, busy = 0, 1, True
                try:
                    found = self._tick(started)
                    if found is None:
                        spacing = MAIN_ONLY_SPACING
                    busy = bool(found)
                    total = self._main_cpu_ns
                    main_cpu, self._main_cpu_counted = total - self._main_cpu_counted, total
                except Exception as exc:  # one bad tick costs that tick, not the sampler
                    recorder.internal_error(exc)
                self.ticks += 1
                ended = time.perf_counter_ns()
                self.cost_ns += ended - started + main_cpu
                # Paced on the CPU the tick used: waiting for the GIL mid-tick costs nobody.
                interval = pacer.tick(time.thread_time_ns() - started_cpu + main_cpu, ended)
                if self._ticks is not None and self._ticks.interval_ns != interval:
                    self._ticks.interval_ns = interval
                if self._park(busy):  # no tick while it waited, so no gap either
                    due = time.perf_counter_ns() + self._next_interval()
                    continue
                due += self._next_interval() * spacing
                if due < started:  # fell behind: skip the missed ticks rather than burst
                    due = started + self._next_interval()
        except Exception as exc:
            recorder.internal_error(exc)
        finally:
            if self._turn is not None:
                self._turn.stop()  # it asks for the GIL for this thread no more
            self._finish(time.perf_counter_ns())

    def _late(self, due: int, started: int, interval: int) -> None:
        """Count a tick that started more than an interval after it was due; one that came
        ``GAP_INTERVALS`` late or more leaves a gap: no thread was read in between (a sampler
        thread kept from the GIL, or off the CPU), sent as a sample of ``wire.GAP_TID`` so that the
        repository can say which sequences it falls in."""
        late = started - due
        if late <= interval:
            return
        self.late_ticks += 1
        if late >= GAP_INTERVALS * interval:
            self._output.put(
                (wire.GAP_TID, due, max(1, late // interval), late, 0, (), (), None, None)
            )

    def _wait(self, timeout_ns: int) -> bool:
        """Wait for the next tick; True when the sampler stops. With
        ``tracer/_sampling/_gil_turn.c`` the wait ends holding the GIL, taken from its holder where
        it is: a thread that gives the GIL up for microseconds at a time (an event loop between task
        steps) wins it straight back from a waiter, which saw it only there, and only a few times a
        second."""
        if self._turn is not None:
            return bool(self._turn.wait(timeout_ns)) or self._stop.is_set()
        return self._stop.wait(timeout_ns / 1e9)

    def _tick(self, now: int) -> bool | None:
        """Sample the threads this thread reads: whether any was inside a traced call (or is
        still in a sample's span), None when there were none to read (only the main thread
        records, and it samples itself)."""
        readings = self._readings
        threads = recorder.sampled_threads()  # ident -> (tid, native id) of recording threads
        main_only = {self._main_ident}
        if self._ticks is not None and threads.keys() | readings.pending.keys() <= main_only:
            return None
        frames, _held = current_frames()  # _held: made in one step, kept till the return
        # This thread's own frame holds ``frames``: left in, it would make a reference cycle
        # through every frame seen this tick, and the garbage collector (not reference counts)
        # would free their locals in any order, which crashes CPython 3.12 when one of them is
        # a BytesIO with a live buffer (python/cpython#111331), e.g. in multiprocessing.
        del frames[threading.get_ident()]
        excluded = self._exclude()
        # The C accelerator's wrapper leaves no frame on the stack: its calls are counted instead.
        in_c_calls = recorder.threads_in_c_calls() if self._only_active else set()
        if self._ticks is not None:
            excluded = excluded | {self._main_ident}  # it samples itself (``_main_tick``)
        # Each candidate with its stack's frames when deciding walked them (None: not walked).
        candidates: list[tuple[int, FrameType, list[FrameType] | None]] = []
        for ident, top in frames.items():
            if ident not in threads:
                continue
            if ident in excluded:
                if ident in readings.pending:  # it waits in the tracer's flush: end it
                    readings.left(ident, now, running=False)
                continue
            walked: list[FrameType] | None = None
            if self._only_active and ident not in in_c_calls:
                walked = []
                if not worth_sampling(top, walked):
                    if ident in readings.pending:  # it left its traced calls since: end it
                        readings.left(ident, now, running=False)
                    continue
            candidates.append((ident, top, walked))
        readings.forget_gone(frames)
        if len(candidates) > self._max_threads:
            candidates = self._random.sample(candidates, self._max_threads)
        for ident, top, walked in candidates:
            tid, native_id = threads[ident]
            readings.watch(ident, native_id)
            if self.mode == "cpu" and not readings.ran(ident):
                readings.idle(ident, now)
                continue
            readings.sample(ident, tid, stack_of(top if walked is None else walked), now)
        return bool(candidates or readings.pending)

    def _emit(self, sample: Pending, end: int | None, cpu_ns: int | None) -> None:
        """Queue a sample whose span ends at ``end``; without a next sample (the thread ended,
        the sampler stops) it lasts one interval past its last instant."""
        if end is None:
            end = sample.last_ns + self._pacer.interval_ns
        cpu = sample.cpu_ns if cpu_ns is None else cpu_ns
        self._output.put(record_of(sample, end, cpu, cpu_mode=self.mode == "cpu"))

    def _finish(self, now: int) -> None:
        interval = self._pacer.interval_ns
        self._readings.finish(now, interval)
        with self._main_lock:  # the main thread's last tick, if it was in one, is over
            self._main_readings.finish(now, interval)

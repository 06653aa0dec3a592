"""The main thread samples itself (``tracer/_sampling/_main_ticks.c``, with the C accelerator): a
thread of ours that never takes the GIL asks it, about every interval, to run ``_main_tick`` at its
next bytecode boundary, which sees the frame it was in. The sampler thread would see a busy main
thread only where it gives up the GIL; the main thread is seen where it is. Part of ``Sampler``
(``sampler.py``), whose state it reads.

More in docs/architecture.md, "tracer/_sampling/sampler.py".
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Final

from tracer._core import recorder
from tracer._sampling.active import worth_sampling
from tracer._sampling.c_helpers import _main_ticks
from tracer._sampling.readings import Readings
from tracer._sampling.stacks import stack_of

#: The main thread answered a tick this much after it was asked, or later: it was blocked where
#: it is (in a call, or waiting for the GIL), not running there (it answers within microseconds
#: where it runs Python). Ticks that fell meanwhile say so too, but a ticker thread kept off
#: the CPU may have asked only once.
MAIN_ANSWER_NS: Final = 1_000_000


class MainThreadTicks:
    """The main thread's own ticks, a part of ``Sampler``: ``_start_ticks`` starts them, and
    ``_main_tick`` runs in the main thread at each. The attributes below are ``Sampler``'s."""

    mode: str
    _only_active: bool
    _exclude: Callable[[], set[int]]
    _stop: threading.Event
    _main_lock: threading.Lock
    _pid: int
    _main_ident: int
    _main_readings: Readings
    _main_cpu_ns: int
    _ticks: Any
    _main_busy: bool

    def _start_ticks(self, interval_ns: int) -> None:
        """The main thread samples itself from now on (``tracer/_sampling/_main_ticks.c``), when it
        can."""
        if _main_ticks is None:
            return
        try:
            ticks = _main_ticks.Ticks(self._main_tick)
            ticks.start(interval_ns)
            self._ticks = ticks
        except Exception as exc:  # the sampler thread reads the main thread then
            recorder.internal_error(exc)

    def _main_tick(self, top: FrameType, skipped: int) -> None:
        """In the main thread, at the request of ``tracer/_sampling/_main_ticks.c``: sample the
        frame ``top`` it was in. The ``skipped`` ticks fell while it could not answer (it was
        blocked there): they are that stack's too."""
        if self._stop.is_set() or os.getpid() != self._pid:
            return
        self._main_lock.acquire()  # uncontended but when the sampler finishes
        try:
            if self._stop.is_set():
                return
            now, now_cpu = time.perf_counter_ns(), time.thread_time_ns()
            ident = self._main_ident
            sampled = recorder.sampled_thread(ident)
            if sampled is None:  # it has recorded nothing yet
                self._main_busy = False
                return
            readings = self._main_readings
            readings.watch(ident, sampled[1])
            self._main_busy = True
            frames: list[FrameType] | None = None  # the stack, when deciding walked it (once)
            worth = ident not in self._exclude()  # not waiting in the tracer's flush
            if worth and self._only_active and not recorder.in_c_call():
                frames = []
                worth = worth_sampling(top, frames)
            if not worth:
                readings.left(ident, now, running=not skipped)
                self._main_busy = bool(readings.pending)
            elif self.mode == "cpu" and not readings.ran(ident):
                readings.idle(ident, now)
            else:
                # It answers at once where it runs Python; later, where it was blocked (in a
                # call, or waiting for the GIL). Blocked past the next tick, it was where it is
                # since it was asked (but for the innermost frame perhaps, entered as it took
                # the GIL back: a wait for the GIL past a tick is rarer than one in a call).
                ticks = self._ticks
                asked = now if ticks is None else ticks.asked_ns
                blocked = skipped > 0 or now - asked > MAIN_ANSWER_NS
                stack = stack_of(top if frames is None else frames)
                readings.sample(
                    ident,
                    sampled[0],
                    stack,
                    now,
                    weight=1 + skipped,
                    running=not blocked,
                    since=asked if skipped else None,
                )
            self._main_cpu_ns += time.thread_time_ns() - now_cpu
        except Exception as exc:
            recorder.internal_error(exc)
        finally:
            self._main_lock.release()

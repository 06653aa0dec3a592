"""The stack sampler: a daemon thread that periodically records the stacks of the traced threads.

Instrumenting every function costs too much, so the tree stops at the last traced call; samples
fill in what ran below it (the repository merges them in as *estimated* nodes).

Every ``interval_ms`` the sampler reads ``sys._current_frames()`` and picks at most
``max_threads_per_tick`` threads at random among the candidates: the threads that have recorded
events, never the sampler or the sender, and (``only_active``) only those inside a traced call,
which is the case when a tracer frame is on their stack. In ``cpu`` mode a candidate must also be
running, read from ``/proc/self/task/<native id>/stat`` (without ``/proc`` the sampler says so once
and samples in ``wall`` mode).

A sample's duration and CPU time are those of the span until the same thread's next sample, so a
sample is emitted one sample late. Consecutive identical samples of a thread that used no CPU in
between collapse into one with ``weight = N``: a thread blocked for minutes costs one record.
The tracer's own frames are left out of every stack.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final

from tracer import context, recorder

log = logging.getLogger("tracer")

_TRACER_DIR: Final = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: The files whose frames wrap a traced call (decorator wrappers, hand-off runners): a thread with
#: one of them on its stack is inside a sequence.
_WRAPPER_FILES: Final = frozenset(
    _TRACER_DIR + name for name in ("decorator.py", "handoff.py", "patching/processes.py")
)
MAX_PENDING_SAMPLES: Final = 200_000
MAX_DEPTH: Final = 512

#: A sample as the sender encodes it: (tid, t_ns, weight, duration_ns, cpu_ns, frames, lines).
SampleTuple = tuple[int, int, int, int, int, tuple[int, ...], tuple[int, ...]]


@dataclass(slots=True)
class _Pending:
    """A thread's latest sample, waiting for its next one to know its duration and CPU time."""

    tid: int
    t_ns: int
    cpu_ns: int  # the thread's CPU clock when the sample was taken
    frames: tuple[int, ...]
    lines: tuple[int, ...]
    weight: int = 1


def _cpu_clock(ident: int) -> int | None:
    """The id of the thread's POSIX CPU clock (read with one cheap syscall), or None."""
    try:
        clock = time.pthread_getcpuclockid(ident)
        time.clock_gettime_ns(clock)
    except (AttributeError, OSError, OverflowError):
        return None
    return clock


def _running(native_id: int) -> bool | None:
    """Whether the thread is running (state R), or None when /proc cannot tell."""
    try:
        with open(f"/proc/self/task/{native_id}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return bool(fields) and fields[0] == b"R"


class Sampler:
    def __init__(
        self,
        *,
        interval_ms: int,
        mode: str,
        only_active: bool,
        max_threads_per_tick: int,
        exclude: Callable[[], set[int]],
    ) -> None:
        self.interval_ns = interval_ms * 1_000_000
        self.mode = mode
        self._only_active = only_active
        self._max_threads = max_threads_per_tick
        self._exclude = exclude  # idents of the tracer's own threads
        self._random = random.Random(os.urandom(16))
        self._pending: dict[int, _Pending] = {}  # by thread ident
        self._clocks: dict[int, int | None] = {}  # thread ident -> its CPU clock id
        self._lock = threading.Lock()
        self._samples: list[SampleTuple] = []
        self.dropped = 0
        self.ticks = 0
        self.late_ticks = 0
        self.cost_ns = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="invoseq-sampler", daemon=True)

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def start(self) -> None:
        if self.mode == "cpu" and _running(threading.get_native_id()) is None:
            log.warning("invoseq: /proc is not readable here; the sampler uses wall mode")
            self.mode = "wall"
        token = context.current.set(None)  # never part of a sequence (see Sender.start)
        try:
            self._thread.start()
        finally:
            context.current.reset(token)

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def drain(self) -> list[SampleTuple]:
        with self._lock:
            samples, self._samples = self._samples, []
        return samples

    def report(self) -> tuple[str, int, int, int, int]:
        """As tracer.wire.SamplerReport: mode, interval, ticks, late ticks, cost."""
        interval_ms = self.interval_ns // 1_000_000
        return self.mode, interval_ms, self.ticks, self.late_ticks, self.cost_ns

    # -- the sampler thread -----------------------------------------------------------------------

    def _run(self) -> None:
        interval = self.interval_ns
        due = time.perf_counter_ns() + interval
        try:
            while not self._stop.wait(max(0, due - time.perf_counter_ns()) / 1e9):
                started = time.perf_counter_ns()
                if started - due > interval:
                    self.late_ticks += 1
                try:
                    self._tick(started)
                except Exception as exc:  # one bad tick costs that tick, not the sampler
                    recorder.internal_error(exc)
                self.ticks += 1
                self.cost_ns += time.perf_counter_ns() - started
                due += interval
                if due < started:  # fell behind: skip the missed ticks rather than burst
                    due = started + interval
        except Exception as exc:
            recorder.internal_error(exc)
        finally:
            self._finish(time.perf_counter_ns())

    def _tick(self, now: int) -> None:
        frames = sys._current_frames()
        excluded = self._exclude()
        threads = recorder.sampled_threads()  # ident -> (tid, native id) of recording threads
        candidates: list[tuple[int, FrameType]] = []
        for ident, top in frames.items():
            if ident in excluded or ident not in threads:
                continue
            if self._only_active and not _inside_traced_call(top):
                continue
            candidates.append((ident, top))
        for ident in [i for i in self._pending if i not in frames]:
            self._emit(self._pending.pop(ident), now, None)  # the thread ended
        for ident in [i for i in self._clocks if i not in frames]:
            del self._clocks[ident]
        if len(candidates) > self._max_threads:
            candidates = self._random.sample(candidates, self._max_threads)
        for ident, top in candidates:
            tid, native_id = threads[ident]
            if self.mode == "cpu" and _running(native_id) is False:
                continue
            self._sample(ident, tid, top, now)

    def _sample(self, ident: int, tid: int, top: FrameType, now: int) -> None:
        clock = self._clocks.get(ident, _UNSET)
        if clock is _UNSET:
            clock = self._clocks[ident] = _cpu_clock(ident)
        cpu = 0
        if clock is not None:
            try:
                cpu = time.clock_gettime_ns(clock)
            except OSError:  # the thread ended since the tick began: its clock is gone
                self._clocks.pop(ident, None)
                return
        frames, lines = self._stack(top)
        previous = self._pending.get(ident)
        if previous is not None:
            used = cpu - previous.cpu_ns
            if used == 0 and previous.frames == frames and previous.lines == lines:
                previous.weight += 1  # still idle in the same place: collapse
                return
            self._emit(previous, now, used)
        self._pending[ident] = _Pending(tid, now, cpu, frames, lines)

    def _emit(self, sample: _Pending, end: int, cpu_used: int | None) -> None:
        """Queue a sample whose span ended at ``end``; without a next sample (the thread ended,
        the sampler stops) it stands for one interval and its CPU use is unknown (0)."""
        if cpu_used is None:
            duration, cpu_used = self.interval_ns * sample.weight, 0
        else:
            duration = max(0, end - sample.t_ns)
        record = (
            sample.tid,
            sample.t_ns,
            sample.weight,
            duration,
            max(0, cpu_used),
            sample.frames,
            sample.lines,
        )
        with self._lock:
            if len(self._samples) >= MAX_PENDING_SAMPLES:
                self.dropped += 1
                return
            self._samples.append(record)

    def _finish(self, now: int) -> None:
        for sample in self._pending.values():
            self._emit(sample, now, None)
        self._pending.clear()

    def _stack(self, top: FrameType) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Frame ids and lines from the outermost call to the innermost, tracer frames left out."""
        ids: list[int] = []
        lines: list[int] = []
        frame: FrameType | None = top
        frame_id = recorder.frame_id
        while frame is not None and len(ids) < MAX_DEPTH:
            code = frame.f_code
            if not code.co_filename.startswith(_TRACER_DIR):
                ids.append(frame_id(code))
                lines.append(frame.f_lineno or 0)
            frame = frame.f_back
        ids.reverse()
        lines.reverse()
        return tuple(ids), tuple(lines)


_UNSET: Any = object()


def _inside_traced_call(top: FrameType) -> bool:
    frame: FrameType | None = top
    depth = 0
    while frame is not None and depth < MAX_DEPTH:
        if frame.f_code.co_filename in _WRAPPER_FILES:
            return True
        frame = frame.f_back
        depth += 1
    return False

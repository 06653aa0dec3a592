"""A sampler reader's bookkeeping (``tracer/_sampling/sampler.py``): what it knows of each thread it
reads, and how consecutive samples of a thread become spans of its time.

More in docs/architecture.md, "tracer/_sampling/readings.py".
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, TypeAlias


@dataclass(slots=True)
class Pending:
    """A thread's latest sample (or run of collapsed ones), waiting for the next sample of the
    thread to know where its span ends and how much CPU it used."""

    tid: int
    start_ns: int  # where its span begins (at or before the first sample's instant)
    last_ns: int  # the instant of its last sample
    first_ns: int  # the instant of its first sample: the stack was this one then
    cpu_clock: int  # the thread's CPU clock at that instant
    frames: tuple[int, ...]
    lines: tuple[int, ...]
    running: bool  # the thread was mostly on the CPU just before the sample
    cpu_ns: int = 0  # CPU time already credited to the span
    weight: int = 1


#: Where a finished sample goes: (sample, end of its span or None, CPU time or None); ``end``
#: None: one interval past its last instant.
Emit: TypeAlias = Callable[[Pending, "int | None", "int | None"], None]

_UNSET: Any = object()


class Readings:
    """What one reader (the sampler thread, or the main thread sampling itself) knows of the
    threads it reads, by thread ident, and their samples in the making, each finished (``emit``)
    when the thread's next sample shows where its span ends. Each reader has its own: neither
    waits for the other."""

    __slots__ = ("_emit", "_natives", "clocks", "idle_since", "last_cpu", "pending")

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self.pending: dict[int, Pending] = {}
        self.clocks: dict[int, int | None] = {}  # a thread's CPU clock id (gone: absent)
        self._natives: dict[int, int] = {}  # the native id its clock was made from
        self.idle_since: dict[int, int] = {}  # CPU mode: its clock when seen idle
        self.last_cpu: dict[int, int] = {}  # CPU mode: its clock at the last look

    def forget_gone(self, alive: Container[int]) -> None:
        """The threads not ``alive`` ended: their samples end one interval past their last
        instant, and their clocks are forgotten."""
        for ident in [i for i in self.pending if i not in alive]:
            self._emit(self.pending.pop(ident), None, None)
        for ident in [i for i in self._natives if i not in alive]:
            del self._natives[ident]
            self.clocks.pop(ident, None)
            self.idle_since.pop(ident, None)
            self.last_cpu.pop(ident, None)

    def finish(self, now: int, interval_ns: int) -> None:
        """The sampler stops at ``now``: every sample in the making ends, lasting until then but
        at most ``interval_ns`` past its last instant (as long as a tick would have taken to see
        it again), with the CPU its thread used in that span; a gone thread's, one interval past
        its last instant. Before, the CPU a thread used after its last tick was lost (CI saw CPU
        mode estimate a 300 ms spin, a program's last, 35 ms short)."""
        for ident, previous in list(self.pending.items()):
            cpu = self.cpu_now(ident)
            if cpu is None:
                self._emit(previous, None, None)
                continue
            end = min(now, previous.last_ns + interval_ns)
            used = _since(previous, cpu, now)[1]
            self._emit(previous, end, previous.cpu_ns + min(used, end - previous.last_ns))
        self.pending.clear()

    def ran(self, ident: int) -> bool:
        """CPU mode: whether the thread used the CPU since the sampler last looked at it. Its CPU
        clock says so exactly; a state (as /proc shows it) could not, because while the sampler
        holds the GIL a busy Python thread waits for it and looks asleep. A first look has
        nothing to compare with: it only reads the clock, and the thread counts as idle until
        the next look (``idle`` keeps the reading, so the CPU it uses in between is credited
        to its first sample)."""
        cpu = self.cpu_now(ident)
        if cpu is None:
            return False
        last = self.last_cpu.get(ident)
        self.last_cpu[ident] = cpu
        return last is not None and cpu > last

    def watch(self, ident: int, native_id: int) -> None:
        """The thread ``ident`` is seen alive with the native id ``native_id``: its CPU clock is
        made from that id (once; again should a new thread take the ident)."""
        if self._natives.get(ident) != native_id:
            self._natives[ident] = native_id
            self.clocks[ident] = cpu_clock(native_id)

    def cpu_now(self, ident: int) -> int | None:
        """The thread's CPU clock, 0 without one, None when the thread is gone (or was never
        ``watch``ed)."""
        clock = self.clocks.get(ident, _UNSET)
        if clock is None:
            return 0
        if clock is _UNSET:
            return None
        try:
            return time.clock_gettime_ns(clock)
        except OSError:  # the thread ended since the tick began: its clock is gone
            del self.clocks[ident]
            return None

    def idle(self, ident: int, now: int) -> None:
        """CPU mode saw the thread off the CPU: its pending sample ends here, with the CPU used so
        far; what it uses from now on belongs to its next sample."""
        cpu = self.cpu_now(ident)
        if cpu is None:
            return
        previous = self.pending.pop(ident, None)
        if previous is not None:
            self._emit(previous, now, previous.cpu_ns + max(0, cpu - previous.cpu_clock))
        self.idle_since[ident] = cpu

    def left(self, ident: int, now: int, *, running: bool) -> None:
        """The thread was seen outside any traced call: its pending sample ends where its
        stack changed, as it would at a sample showing another stack, rather than stretch over
        what it ran since (an event loop between task steps; waiting for the GIL there)."""
        previous = self.pending.pop(ident, None)
        if previous is None:
            return
        cpu = self.cpu_now(ident)
        if cpu is None:
            self._emit(previous, None, None)
            return
        gap, used = _since(previous, cpu, now)
        self._end(previous, boundary(previous, gap, used, running=running), used, now)

    def sample(
        self,
        ident: int,
        tid: int,
        stack: tuple[tuple[int, ...], tuple[int, ...]],
        now: int,
        *,
        weight: int = 1,
        running: bool = False,
        since: int | None = None,
    ) -> None:
        """Sample the thread, seen at ``stack`` (frame ids and lines, outermost first):
        ``weight`` ticks; ``running`` when it is known to have been running, not waiting, where
        it is seen (``boundary``); ``since`` an instant before ``now`` when the stack was
        already this one (the main thread asked at a tick, answering when its blocking call
        returned), else ``now``."""
        cpu = self.cpu_now(ident)
        if cpu is None:
            return
        frames, lines = stack
        previous = self.pending.get(ident)
        if previous is None:
            since_idle = self.idle_since.pop(ident, cpu)
            first = now if since is None else min(since, now)
            self.pending[ident] = Pending(
                tid,
                first,
                now,
                first,
                cpu,
                frames,
                lines,
                running=True,
                cpu_ns=max(0, cpu - since_idle),
                weight=weight,
            )
            return
        gap, used = _since(previous, cpu, now)
        same = previous.frames == frames and previous.lines == lines
        if same and used == 0:  # still idle in the same place: collapse
            previous.weight += weight
            previous.last_ns = now
            previous.running = False
            return
        split = now if same else boundary(previous, gap, used, running=running)
        if since is not None:  # it was at this stack by then: it changed no later
            since = max(previous.last_ns, min(since, now))
            split = min(split, since)
        before = self._end(previous, split, used, now)
        self.pending[ident] = Pending(
            tid,
            split,
            now,
            now if since is None else since,
            cpu,
            frames,
            lines,
            # Known to run at the sample (the main thread answering at once), or mostly on the
            # CPU since the last: a loaded machine gives a busy thread less than half of it.
            running=running or used * 2 > gap,
            cpu_ns=used - before,
            weight=weight,
        )

    def _end(self, previous: Pending, split: int, used: int, now: int) -> int:
        """``previous``'s span ends at ``split`` with its share of the CPU ``used`` since its
        last instant; returns that share (the rest belongs to what follows)."""
        before = cpu_before(previous, split, used, now)
        self._emit(previous, split, previous.cpu_ns + before)
        return before


def _since(previous: Pending, cpu: int, now: int) -> tuple[int, int]:
    """The wall time since ``previous``'s last instant, and the CPU its thread used in it."""
    gap = max(0, now - previous.last_ns)
    return gap, min(gap, max(0, cpu - previous.cpu_clock))


def cpu_clock(native_id: int) -> int | None:
    """The id of the POSIX CPU clock (read with one cheap syscall) of the thread whose kernel id
    is ``native_id``, or None where threads have none.

    It is made from the kernel's id as glibc's ``pthread_getcpuclockid`` makes it from the one it
    reads in the thread's descriptor (Linux's ``MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)``),
    because that descriptor is freed when a thread ends: asked for a thread that ended between
    the tick's look at the threads and the call, ``pthread_getcpuclockid`` read freed memory,
    and crashed a process in CI when glibc had unmapped it. The kernel answers a clock whose
    thread is gone with EINVAL, and one of a thread of another process likewise."""
    if sys.platform != "linux":
        return None
    clock = (~native_id << 3) | 6
    try:
        time.clock_gettime_ns(clock)
    except (OSError, OverflowError):
        return None
    return clock


def boundary(previous: Pending, gap: int, used: int, *, running: bool = False) -> int:
    """Where, between two samples of a thread showing different stacks, the first stack ended.

    The sampler only sees a thread when it holds the GIL, which a thread that blocks releases at
    once and a running one only every switch interval: a naive "the span lasts until the next
    sample" credits waits with the running time that follows them. The thread's CPU clock tells
    better. An idle thread woke ``used`` before the next sample (it ran since); a running one ran
    ``used`` and then changed; one that ran through the whole gap changed at an unknown moment:
    the middle. So did one ``running`` at the second sample, as the main thread is when it
    answers its tick at once (``Sampler._main_tick``): it did not wait where that sample saw it, and
    where it did wait (for the GIL, in a system call between two task steps) is unknown."""
    start = previous.last_ns
    if not previous.running:
        return start + gap - used
    if running or used * 10 >= gap * 9:
        return start + gap // 2
    return start + used


def cpu_before(previous: Pending, split: int, used: int, now: int) -> int:
    """Of the CPU ``used`` between ``previous``'s last instant and ``now``, the part before
    ``split``: a running thread used it first, an idle one after waking."""
    if previous.running:
        return min(used, split - previous.last_ns)
    return max(0, used - (now - split))

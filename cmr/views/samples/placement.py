"""Where a stack sample fell among the measured calls of its thread, and the ticks around an
instant: the rules ``merge_samples`` builds estimated nodes with (its module docstring), shared
with the OTLP profiles export (``cmr.otlp.profiles``), which links each sample to its call.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Final

from cmr.store.base import FrameRecord, SampleRecord
from cmr.views.model import Bounds, Node
from cmr.views.samples.timeline import Call, FrameKey, ThreadCalls

#: Where a sampled stack shows an event loop between task steps, by the function and the file a
#: frame names: asyncio's iteration (``BaseEventLoop._run_once``), and ``asyncio.Runner.run``
#: (``asyncio.run``, ``uvloop.run``), which a loop iterating in C (uvloop) leaves innermost
#: while it waits, with a step's frames right above it while it runs one. The deepest wins:
#: under asyncio's own loop, ``Runner.run`` is below ``_run_once``.
LOOP_FRAMES: Final = {
    "BaseEventLoop._run_once": ("asyncio/base_events.py", "asyncio\\base_events.py"),
    "Runner.run": ("asyncio/runners.py", "asyncio\\runners.py"),
}


@dataclass(frozen=True, slots=True)
class Placement:
    """The part of a sample that fell in one measured call (the module docstring's rules)."""

    call: Call
    cut: int  # the stack's frames after this position ran beneath the call
    count: int  # the ticks it stands for
    start: int  # its first instant inside the call
    time: int  # the wall time it stands for inside the call
    cpu: int  # the CPU time, pro rata
    # A single tick's sample: when its span ends (the next sample of its thread starts); its
    # tick fell somewhere in ``[start, until)``. ``time`` says what the sample counts for (in CPU
    # mode, CPU time), not where its tick was.
    until: int | None = None
    # Its stack showed the event loop between two steps of the interleaved tasks it fell among,
    # none of them: it went to the call running the loop (``_place_below_caller``).
    between_tasks: bool = False
    # Of those, one whose stack showed the event loop itself (not a function tasks share).
    at_loop: bool = False
    # When the sample's first and last ticks saw its stack (``SampleRecord.ticks``).
    ticks: tuple[int, int] | None = None

    def seen(self) -> tuple[int, int] | None:
        """When the ticks that saw what it saw, in this call, fell (None: none of them did).

        With the ticks known, the first and last of them in the call's part of the sample: its
        own first and last where the part holds them (exact), else the edges of the part (a
        collapsed sample cut by a call's edge; its ticks in between are not sent): (first, last).
        Without them
        (a tracer that predates them) it is taken to have run throughout its sample's span (or
        the part of a collapsed one inside the call), as its time is: bounds that are ordered,
        though not certain (a tick anywhere in a span bounds nothing in order)."""
        part_end = self.start + max(1, self.time)
        if self.ticks is None:
            until = part_end if self.until is None else max(self.until, self.start + 1)
            return self.start, until - 1
        first, last = self.ticks
        if self.until is not None:  # one tick (or ticks of one sample, wholly in the call)
            return first, last
        low, high = max(first, self.start), min(last, part_end - 1)
        if low > high:
            return None  # its ticks fell outside the call: only its time did not
        return low, high


def place_sample(
    sample: SampleRecord, thread: ThreadCalls, frames: dict[tuple[int, int], FrameRecord]
) -> tuple[list[Placement], int]:
    """Where one sample of ``thread`` fell: a placement per measured call it fell in (a
    collapsed sample may span several), and the weight that fell in none it could be cut for."""
    deepest: dict[FrameKey, int] = {}
    loop_at: int | None = None  # where the stack shows asyncio's event loop iteration
    known, puid = frames.get, sample.puid
    for position, frame in enumerate(sample.frames):  # a stack of hundreds: a lookup each
        record = known((puid, frame))
        if record is not None:
            deepest[record.file, record.line] = position
            loop_files = LOOP_FRAMES.get(record.function)
            if loop_files is not None and record.file.endswith(loop_files):
                loop_at = position
    t, duration = sample.t_ns, sample.duration_ns
    if sample.weight == 1 or duration == 0:
        # The calls open when its tick saw the stack: its span may begin before a task that
        # the tick saw had started (the sampler places where a stack changed by the CPU clock),
        # and the one task open there then is not the one the stack shows.
        tick = t if sample.ticks is None else sample.ticks[0]
        candidates = thread.innermost(tick)
        if not candidates:
            return [], 0
        placed = _place(candidates, deepest, loop_at)
        if placed is None:
            return [], sample.weight
        call, cut, between, at_loop = placed
        # Its time starts no earlier than the call, and ends where a callee of the call starts;
        # not when it ran in one of the interleaved tasks that are the callees (``between``),
        # which one the stack cannot say.
        begin = min(max(t, call.start), tick)
        stop = min(
            t + duration,
            call.end,
            t + duration if between else call.inner.next_start_after(tick),
        )
        time = max(0, stop - begin)
        cpu = sample.cpu_ns if duration == 0 else sample.cpu_ns * time // duration
        placement = Placement(
            call,
            cut,
            sample.weight,
            begin,
            time,
            cpu,
            between_tasks=between,
            at_loop=at_loop,
            ticks=sample.ticks,
        )
        return [placement], 0
    # A collapsed sample: split its span where any call on the thread starts or ends. Its ticks
    # fell in the pieces its stack can have been seen in (``_impossible``): they share them.
    pieces = thread.pieces(t, t + duration)
    impossible = _impossible(pieces, thread, deepest) if len(pieces) > 1 else set()
    possible = duration - sum(pieces[index][1] - pieces[index][0] for index in impossible)
    if not possible:
        return [], sample.weight
    overlap: dict[Call, tuple[int, int, int, bool, bool]] = {}  # call -> (cut, first, time, …)
    missed = 0
    for index, (piece_start, piece_end) in enumerate(pieces):
        candidates = thread.innermost(piece_start)
        if not candidates or index in impossible:
            continue
        placed = _place(candidates, deepest, loop_at)
        if placed is None:
            missed += piece_end - piece_start
            continue
        call, cut, between, at_loop = placed
        # A piece among interleaved tasks keeps the call's share among them, whatever pieces
        # follow (the loop waiting on after its tasks ended): that time ran while they were open.
        _cut, first, spent, was_between, was_loop = overlap.get(
            call, (cut, piece_start, 0, between, at_loop)
        )
        overlap[call] = (
            cut,
            first,
            spent + piece_end - piece_start,
            between or was_between,
            at_loop or was_loop,
        )
    placements = [
        Placement(
            call,
            cut,
            _share(sample.weight, spent, possible),
            first,
            spent,
            sample.cpu_ns * spent // possible,
            between_tasks=between,
            at_loop=at_loop,
            ticks=sample.ticks,
        )
        for call, (cut, first, spent, between, at_loop) in overlap.items()
    ]
    return placements, _share(sample.weight, missed, possible)


def _impossible(
    pieces: list[tuple[int, int]], thread: ThreadCalls, deepest: dict[FrameKey, int]
) -> set[int]:
    """The pieces of a collapsed sample's span (by position) its stack cannot have been seen
    in: a measured function it shows ran on the thread during the span, but had no call open
    in the piece.

    A span's start is an estimate (where the stack changed, between two ticks), and so is the
    main thread's claim that a stack it answers late was already there when asked: a thread
    the system took off the CPU in C code on its way into a task's first step answers in that
    step, and its claim begins before the task did. Before the task's call opened, the stack
    showing it was not there: that piece would otherwise go to whichever call was open then
    (the other task, under the event loop)."""
    open_in: list[set[FrameKey]] = []
    for start, _end in pieces:
        keys: set[FrameKey] = set()
        for call in thread.innermost(start):
            caller: Call | None = call
            while caller is not None:
                if caller.key is not None:
                    keys.add(caller.key)
                caller = caller.parent
        open_in.append(keys)
    shown = set().union(*open_in).intersection(deepest)
    return {index for index, keys in enumerate(open_in) if keys and not shown <= keys}


def _share(weight: int, part: int, whole: int) -> int:
    """round(weight * part / whole), halves up, in integers."""
    return (2 * weight * part + whole) // (2 * whole)


def _place(
    candidates: list[Call], deepest: dict[FrameKey, int], loop_at: int | None
) -> tuple[Call, int, bool, bool] | None:
    """The candidate the stack shows, the position below which its frames start, and whether
    the stack could not tell which of several interleaved tasks it was: it showed the event
    loop between their steps, or a function several of them were running (then the frames from
    that function's down go under the tasks' nearest common caller, not onto one task), and
    whether it was the event loop."""
    best: tuple[tuple[int, int, int], Call, int] | None = None
    shown: list[tuple[int, int, Call]] = []  # (position, depth, call) of each call shown
    for call in candidates:
        position = deepest.get(call.key) if call.key is not None else None
        if position is not None:
            shown.append((position, call.depth, call))
            rank = (position, call.depth, -call.start)
            if best is None or rank > best[0]:
                best = (rank, call, position)
    if best is None:
        return _place_below_caller(candidates, deepest, loop_at)
    (position, depth, _start), call, _position = best
    alike = [other for p, d, other in shown if (p, d) == (position, depth)]
    if len(alike) > 1:  # interleaved tasks running the same function: the stack cannot tell
        ancestor = _common_caller(alike)
        if ancestor is not None:
            return ancestor, position - 1, True, False
    return call, position, False, False


def _common_caller(calls: list[Call]) -> Call | None:
    """The nearest measured call all of ``calls`` run under, if any."""
    chains: list[list[Call]] = []
    for call in calls:
        chain: list[Call] = []
        caller = call.parent
        while caller is not None:
            chain.append(caller)
            caller = caller.parent
        chains.append(chain)
    others = [{id(c) for c in chain} for chain in chains[1:]]
    return next((c for c in chains[0] if all(id(c) in ids for ids in others)), None)


def _place_below_caller(
    candidates: list[Call], deepest: dict[FrameKey, int], loop_at: int | None
) -> tuple[Call, int, bool, bool] | None:
    """No candidate's own frame is on the stack: cut it below the deepest frame of a measured
    caller on the thread. One candidate (a thread's calls nest) takes the frames below its caller.
    Several (interleaved asyncio tasks) that reach the same caller there are a stack of none of
    them: the event loop between two task steps (where a busy loop gives up the GIL, and so
    where a sampler thread mostly sees it). The frames go to that caller, not to whichever task
    started first. A loop no measured call runs (``asyncio.run`` of a traced coroutine) shows
    no caller's frame: ``_loop_outside_calls``."""
    found: list[tuple[int, Call, Call]] = []  # (position, candidate, the caller found there)
    for call in candidates:
        caller = call.parent
        while caller is not None:
            position = deepest.get(caller.key) if caller.key is not None else None
            if position is not None:
                found.append((position, call, caller))
            caller = caller.parent
    if not found:
        return None if loop_at is None else _loop_outside_calls(candidates, loop_at)
    position = max(p for p, _, _ in found)
    deepest_found = [(call, caller) for p, call, caller in found if p == position]
    callers = {id(caller) for _, caller in deepest_found}
    if len(deepest_found) > 1 and len(callers) == 1:
        return deepest_found[0][1], position, True, True
    call = min((call for call, _ in deepest_found), key=lambda c: c.start)
    return call, position, False, False


def _loop_outside_calls(
    candidates: list[Call], loop_at: int
) -> tuple[Call, int, bool, bool] | None:
    """The stack shows an event loop's iteration (at ``loop_at``) that no measured call runs,
    between the steps of the suspended coroutines ``candidates``: its frames from the iteration
    down go under the one coroutine, or under the nearest measured call the several run under
    (the tasks' caller, itself suspended), as for a loop a call runs. Flagged as the loop: read
    by a sampler thread, where a busy loop gives up the GIL, it stands for their steps too. Under
    several with no common caller, nowhere."""
    if len(candidates) == 1:
        return candidates[0], loop_at - 1, False, True
    caller = _common_caller(candidates)
    return None if caller is None else (caller, loop_at - 1, True, True)


class Ticks:
    """Each thread's samples as spans in time order. A sample starts where the stack changed,
    somewhere between two ticks, and lasts until the next sample starts (the last one:
    ``duration_ns``), so its ticks fell within its span."""

    def __init__(self, samples: list[SampleRecord]) -> None:
        spans: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for s in samples:
            spans.setdefault((s.puid, s.tid), []).append((s.t_ns, s.duration_ns))
        self._threads: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        for thread, found in spans.items():
            found.sort()
            starts = [t for t, _ in found]
            self._threads[thread] = (starts, [*starts[1:], found[-1][0] + found[-1][1]])

    def span_end(self, thread: tuple[int, int], t_ns: int) -> int:
        """Where the span of the thread's sample starting at ``t_ns`` ends."""
        starts, ends = self._threads[thread]
        return ends[bisect.bisect_left(starts, t_ns)]


def bounds_of(node: Node, lasts: list[int], firsts: list[int], seen: Seen) -> Bounds:
    """The bounds of an estimated frame under the measured ``node``, which the ticks of its
    samples saw as ``seen`` says, among the ticks of every sample placed under the node: the
    last and the first tick of each (``lasts``, ``firsts``, sorted).

    It had started by the first tick that saw it, and after the tick under the node before
    that one; it ran until the last tick that saw it, and ended by the next tick under the node:
    each window is the gap between two ticks of the node, or reaches the node's own start or
    end. Ticks of other strands say nothing: while one of them ran (another asyncio task on the
    thread), this one's frames may have been suspended, not ended. Ordered, start_min <=
    start_max <= end_min <= end_max, and within the node's window."""
    start_max, end_min = seen.first_until, seen.last_from
    before = bisect.bisect_left(lasts, start_max) - 1
    start_min = max(node.start_ns, lasts[before]) if before >= 0 else node.start_ns
    after = bisect.bisect_right(firsts, end_min)
    end_max = node.end_ns
    if after < len(firsts):
        end_max = firsts[after] if end_max is None else min(end_max, firsts[after])
    if node.end_ns is not None:
        end_min = min(end_min, node.end_ns)
        start_max = min(start_max, end_min)
    end_min = max(end_min, node.start_ns)
    start_max = max(start_max, node.start_ns)
    start_min = min(start_min, start_max)
    if end_max is not None:
        end_max = max(end_max, end_min)
    return Bounds(start_min, start_max, end_min, end_max)


@dataclass(slots=True)
class Seen:
    """Where the ticks that saw an estimated frame fell (``Placement.seen`` of each sample): it
    had started by the earliest (``first_until``) and was still running at the latest
    (``last_from``)."""

    first_until: int = 2**63 - 1  # the earliest tick that saw it
    last_from: int = -(2**63)  # the latest

    def add(self, first: int, last: int) -> None:
        """The first and last ticks of one more sample that saw it."""
        self.first_until = min(self.first_until, first)
        self.last_from = max(self.last_from, last)

"""What ``sys.monitoring`` itself costs a traced generator against a traced synchronous call, with
callbacks that do next to nothing (issue 33 goal 1 asks a generator or coroutine call to cost at
most 1.5 times a sync call).

``python -m benchmarks.monitoring_floor`` (Python 3.12+; a few seconds) times, in one process,
a call of ``f(x): return x`` and a whole generator of one item (``for _ in g(x)``), bare and then
with ``PY_START``, ``PY_RESUME``, ``PY_YIELD`` and ``PY_RETURN`` enabled on their code and
``_speedups.hook_nothing`` for every callback (it returns None, and is called as the tracer's
handlers are; an earlier version used ``slice`` for the three-argument events, which builds an
object each time): the best of 21 rounds of 100,000, CPU time of this thread. A synchronous
call raises two events, a generator of one item four (its start, its yield, the resume that
finishes it, its return), so what the interpreter adds to the generator, before any tool does
anything, is about twice what it adds to the call. That is the dispatch alone: a tool whose own
work a call outweighs the dispatch's (as the tracer's does) keeps a generator's ratio lower.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator

ROUNDS = 21
CALLS = 100_000
TOOL = 5  # a free tool id, not one the tracer takes


def f(x: int) -> int:
    return x


def g(x: int) -> Iterator[int]:
    yield x


def calls(n: int) -> None:
    for i in range(n):
        f(i)


def generators(n: int) -> None:
    for i in range(n):
        for _ in g(i):
            pass


def best(loop: Callable[[int], None]) -> float:
    """The lowest CPU time of one iteration of ``loop``, ns, over ``ROUNDS`` rounds."""
    lowest = float("inf")
    for _ in range(ROUNDS):
        started = time.thread_time_ns()
        loop(CALLS)
        lowest = min(lowest, (time.thread_time_ns() - started) / CALLS)
    return lowest


def main() -> None:
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        raise SystemExit("sys.monitoring is Python 3.12+")
    events = monitoring.events
    from tracer._core import accel

    if accel.speedups is None:
        raise SystemExit("the floor needs the C accelerator (its no-op hook, _speedups)")
    nothing = accel.speedups.hook_nothing
    bare = best(calls), best(generators)
    monitoring.use_tool_id(TOOL, "floor")
    try:
        for event in (events.PY_START, events.PY_RESUME, events.PY_YIELD, events.PY_RETURN):
            monitoring.register_callback(TOOL, event, nothing)
        local = events.PY_START | events.PY_RESUME | events.PY_YIELD | events.PY_RETURN
        for function in (f, g):
            monitoring.set_local_events(TOOL, function.__code__, local)
        monitored = best(calls), best(generators)
    finally:
        for function in (f, g):
            monitoring.set_local_events(TOOL, function.__code__, 0)
        monitoring.free_tool_id(TOOL)
    added = monitored[0] - bare[0], monitored[1] - bare[1]
    print(
        f"Python {sys.version.split()[0]}: a sync call {bare[0]:.0f} -> {monitored[0]:.0f} ns "
        f"(+{added[0]:.0f}); a generator of one item {bare[1]:.0f} -> {monitored[1]:.0f} ns "
        f"(+{added[1]:.0f}); the generator's added cost {added[1] / added[0]:.2f}x the call's"
    )


if __name__ == "__main__":
    main()

"""What a traced call costs once the process's memory bound is spent (docs/architecture.md, "One
memory bound per process"): it runs untraced and is counted, and should cost less than recording
it, or a program the repository cannot keep up with slows down most when it is most loaded.

``python -m benchmarks.past_bound`` (a few seconds): in one process, the tracer configured to send
to an endpoint nobody listens at, with a bound of 64 KiB and no spool, so that after the first few
hundred calls every call is past the bound; then chunks of ``CALLS`` calls of ``f(x): return x``
nested in one traced root, against the same loop untraced, alternated, this thread's CPU time,
the median of ``ROUNDS`` chunks each. Prints both, the difference, and the calls counted.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from statistics import median

import tracer
from tracer._core import budget

CALLS = 20_000
ROUNDS = 41


@tracer.traced
def traced_leaf(x: int) -> int:
    return x


@tracer.traced
def traced_root(n: int) -> None:
    for i in range(n):
        traced_leaf(i)


def leaf(x: int) -> int:
    return x


def root(n: int) -> None:
    for i in range(n):
        leaf(i)


def per_call(loop: Callable[[int], None]) -> float:
    started = time.thread_time_ns()
    loop(CALLS)
    return (time.thread_time_ns() - started) / CALLS


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        tracer.configure(
            endpoint=f"ipc://{scratch}/nobody.sock",
            max_buffered_bytes=64 * 1024,
            spool_bytes=0,
            sample_interval_ms=0,
            flush_timeout_ms=0,
        )
        try:
            traced_root(CALLS)  # the bound is spent from here on
            before = budget.overflowed()
            bare: list[float] = []
            past: list[float] = []
            for _ in range(ROUNDS):
                bare.append(per_call(root))
                past.append(per_call(traced_root))
            counted = budget.overflowed() - before
        finally:
            tracer.shutdown(0)
    print(
        f"Python {sys.version.split()[0]}: a call past the bound {median(past):.1f} ns, untraced "
        f"{median(bare):.1f} ns: +{median(past) - median(bare):.1f} ns a call; "
        f"{counted:,} of {ROUNDS * CALLS:,} calls counted past it"
    )


if __name__ == "__main__":
    main()

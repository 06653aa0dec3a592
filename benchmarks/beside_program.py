"""The program ``benchmarks/beside.py`` runs under another tool: a loop of calls, traced or not,
timed from inside (start-up and the tool's report at exit are left out).

``python -m benchmarks.beside_program '{"variant": "traced", "calls": 50000, "settrace": false}'``
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from benchmarks.processes import report_result, worker_params


def _trace(frame: FrameType, event: str, arg: object) -> Any:
    """A debugger's kind of trace function: called for every frame and line, does nothing."""
    return _trace


def _loop(calls: int, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> float:
    @wrap
    def leaf(i: int) -> int:
        return i * 2

    @wrap
    def work(n: int) -> int:
        total = 0
        for i in range(n):
            total += leaf(i)
        return total

    started = time.perf_counter()
    work(calls)
    return time.perf_counter() - started


def main() -> None:
    params = worker_params()
    if params["settrace"]:  # before the tracer's threads start, as a debugger would be
        threading.settrace(_trace)
        sys.settrace(_trace)
    if params["variant"] == "traced":
        import tracer

        tracer.configure()
        elapsed = _loop(params["calls"], tracer.traced)
        tracer.shutdown()
    else:
        elapsed = _loop(params["calls"], lambda function: function)
    sys.settrace(None)
    report_result({"loop_s": elapsed})


if __name__ == "__main__":
    main()

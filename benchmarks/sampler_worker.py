"""Case 3's subprocess: what the stack sampler costs a CPU-bound program of 32 threads.

A chunk starts 32 threads that each run the same pure-Python work, until all have joined; its
cost is the CPU time of the whole process (the wall time is kept beside it). Three variants,
interleaved chunk by chunk:

- ``untraced``: the plain function, the tracer shut down;
- ``traced``: the work inside one traced call per thread, sampler off;
- ``sampled``: the same, with the sampler at 100 Hz (``sample_interval_ms=10``).

``sampled / traced`` isolates the sampler; ``sampled / untraced`` is what a user pays in all.
Two more variants run the same work on the main thread alone, which samples itself
(``tracer/_sampling/_main_ticks.c``): ``main traced`` and ``main sampled``.
The tracer sends to a ``cmr serve`` subprocess, so the repository's ingest of the samples is not
charged to the traced process. After every sampled chunk the sampler is stopped and its own
accounting (ticks, time spent in ticks) read back from the repository, a second, quieter
measure of the same cost.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tracer
from benchmarks.harness import interleave
from benchmarks.processes import report_result, start_reporting, stop, worker_params
from cmr.defaults import READY_PREFIX
from tracer import traced

THREADS = 32


def crunch(n: int) -> int:
    """Pure-Python CPU work: holds the GIL but for the interpreter's own switches."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


@traced
def task(n: int) -> int:
    return crunch(n)


WALL: dict[str, list[float]] = {}  # variant -> wall-clock seconds per chunk, beside the CPU time


def run_threads(variant: str, work: Callable[[int], int], n: int) -> float:
    """Runs one chunk; returns the CPU seconds the whole process spent on it (every thread,
    the tracer's included), which other work on the machine disturbs less than wall time."""
    threads = [threading.Thread(target=work, args=(n,)) for _ in range(THREADS)]
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    WALL.setdefault(variant, []).append(time.perf_counter() - started)
    return time.process_time() - cpu


def run_main_thread(variant: str, work: Callable[[int], int], n: int) -> float:
    """One chunk of all the threads' work on the main thread alone; its process CPU seconds."""
    started, cpu = time.perf_counter(), time.process_time()
    work(n)
    WALL.setdefault(variant, []).append(time.perf_counter() - started)
    return time.process_time() - cpu


def main_thread_chunks(configured: Callable[[int], None], n: int) -> dict[str, Callable[[], float]]:
    """The chunks of the main thread alone: traced with the sampler off, and at 100 Hz."""

    def chunk(variant: str, interval_ms: int) -> Callable[[], float]:
        def run() -> float:
            configured(interval_ms)
            try:
                return run_main_thread(variant, task, n)
            finally:
                tracer.shutdown(30)

        return run

    return {"main traced": chunk("main traced", 0), "main sampled": chunk("main sampled", 10)}


def calibrate(chunk_s: float) -> int:
    """Iterations per thread for a chunk of about ``chunk_s`` seconds."""
    n = 20_000
    for _ in range(20):  # bounded: doubles until one run is long enough to time
        started = time.perf_counter()
        crunch(n)
        took = time.perf_counter() - started
        if took > 0.02:
            break
        n *= 2
    return max(1000, int(n * chunk_s / THREADS / took))


def main() -> None:
    from cmr.store import open_store

    params = worker_params()
    workdir = Path(params["workdir"])
    db = workdir / "sampler.sqlite"
    server, endpoint = start_reporting(
        [sys.executable, "-m", "cmr.server", "--bind", f"ipc://{workdir}/s.sock", "--db", str(db)],
        READY_PREFIX,
    )
    n = calibrate(params["chunk_s"])
    accounting: list[dict[str, Any]] = []

    def configured(interval_ms: int) -> None:
        tracer.configure(endpoint=endpoint, sample_interval_ms=interval_ms, flush_timeout_ms=30_000)

    def untraced() -> float:
        tracer.shutdown(30)
        return run_threads("untraced", crunch, n)

    def traced_chunk() -> float:
        configured(0)
        try:
            return run_threads("traced", task, n)
        finally:
            tracer.shutdown(30)

    def sampled_chunk() -> float:
        configured(10)
        try:
            elapsed = run_threads("sampled", task, n)
        finally:
            tracer.shutdown(30)  # stops the sampler; its last report goes with the last batch
        store = open_store(str(db), readonly=True)
        try:
            stats = store.stats()
        finally:
            store.close()
        [report] = stats.samplers.values()  # one process; its latest sampler's counts
        accounting.append(
            {
                "cpu_s": elapsed,
                "wall_s": WALL["sampled"][-1],
                "ticks": report.ticks,
                "late_ticks": report.late_ticks,
                "cost_ns": report.cost_ns,
                "longest_interval_ns": report.longest_interval_ns,
                "samples_stored": stats.samples,
            }
        )
        return elapsed

    try:
        series = interleave(
            {
                "untraced": untraced,
                "traced": traced_chunk,
                "sampled": sampled_chunk,
                **main_thread_chunks(configured, n * THREADS),
            },
            rounds=params["rounds"],
            min_rounds=params["min_rounds"],
            budget_s=params["budget_s"],
        )
    finally:
        tracer.shutdown(30)
        stop(server)
    wall = {variant: times[1:] for variant, times in WALL.items()}  # without the warm-up
    report_result({"iterations": n, "series": series, "wall": wall, "accounting": accounting[1:]})


if __name__ == "__main__":
    main()

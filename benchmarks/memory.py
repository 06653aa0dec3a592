"""Case 5: the tracer's memory while the repository is down.

``benchmarks.memory_worker`` emits requests with nothing listening, the default memory bound
(``max_buffered_bytes``: every thread's buffered events and the batches in memory, together) and
a spool capped at SPOOL_BYTES: once the bound is reached the tracer must turn calls away (and
count them) rather than grow. Runs, each in a fresh subprocess: the main thread as fast as it
goes; the main thread at a service's pace; THREADS threads as fast as they go, once with the C
accelerator (when it is built) and once in pure Python.

Targets (ours; DESIGN.md says "bounded by config"): the peak RSS growth (VmHWM, so nothing
between samples hides) stays under TARGET_MIB (the bound, plus what it does not count: allocator
slack, the interpreter's own growth), the peak rose by at most a quarter of the bound in the
second half of the run (levelled off), and the spool file stays under its cap.
"""

from __future__ import annotations

from typing import Any, Final

from benchmarks.harness import CaseResult, Row, Settings, Target
from benchmarks.machine import accelerator
from benchmarks.processes import clean_environment, run_worker

NAME: Final = "memory"
SPOOL_BYTES: Final = 2 * 2**20
THREADS: Final = 16
#: What the growth must stay under, whatever the number of threads (the issue's figure).
TARGET_MIB: Final = 64.0
#: A safety stop: a worker whose RSS grows past this ends its run early (and says so).
RSS_LIMIT_MIB: Final = 1024
PACED_EVENTS_PER_S: Final = 100_000


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    pure = {"INVOSEQ_PURE": "1"}
    runs: list[tuple[str, int, int, dict[str, str]]] = [
        ("full speed", 0, 0, {}),
        (f"{PACED_EVENTS_PER_S // 1000} k events/s", 0, PACED_EVENTS_PER_S, {}),
        (f"{THREADS} threads", THREADS, 0, {}),
    ]
    if accelerator()["importable"]:
        runs.append((f"{THREADS} threads, pure Python", THREADS, 0, pure))
    duration = settings.budget_s / len(runs)
    for index, (label, threads, pace, extra) in enumerate(runs):
        workdir = settings.workdir / f"memory-{index}"
        workdir.mkdir()
        params = {
            "workdir": str(workdir),
            "duration_s": duration,
            "pace": pace,
            "threads": threads,
            "spool_bytes": SPOOL_BYTES,
            "rss_limit_mib": RSS_LIMIT_MIB,
        }
        env = clean_environment(INVOSEQ_SPOOL_DIR=str(workdir / "spool"), **extra)
        measured = run_worker(
            "benchmarks.memory_worker", params, timeout_s=duration * 10 + 60, env=env
        )
        result.raw[label] = measured
        result.rows.extend(_rows(label, measured))
        if measured["aborted"]:
            result.notes.append(
                f"{label}: stopped early, RSS grew past the {RSS_LIMIT_MIB} MiB safety limit"
            )
    return result


def _rows(label: str, measured: dict[str, Any]) -> list[Row]:
    samples = measured["samples"]
    bound = measured["bound_mib"]
    growth = samples[-1]["peak_growth_mib"]  # VmHWM: the peak, between samples too
    half = next(s for s in samples if s["t"] >= samples[-1]["t"] / 2)["peak_growth_mib"]
    late_growth = growth - half
    buffered = max(s["buffered"] for s in samples)
    counted = max(s["counted_mib"] for s in samples)
    rate = measured["events"] / measured["elapsed_s"]
    path = "C accelerator" if measured["implementation"] == "c" else "pure Python"
    counters = (
        f"{path}; {measured['events']} events in {measured['elapsed_s']:.1f} s "
        f"({rate / 1e3:.0f} k/s), {measured['dropped']} dropped and counted, "
        f"{measured['spooled_batches']} batches spooled, at most {buffered} events waiting in "
        f"the threads' buffers and {counted:.1f} MiB counted against the bound"
    )
    spool = max(s["spool_mib"] for s in samples)
    return [
        Row(
            case=NAME,
            name=f"peak RSS growth, repository down, {label}",
            value=growth,
            unit="MiB",
            baseline=bound,
            baseline_name="max_buffered_bytes (the process's memory bound)",
            ratio=growth / bound,
            targets=(Target("bounded", "<=", TARGET_MIB),),
            note=counters,
        ),
        Row(
            case=NAME,
            name=f"peak RSS growth in the second half of the run, {label}",
            value=late_growth,
            unit="MiB",
            baseline=bound,
            baseline_name="max_buffered_bytes",
            ratio=late_growth / bound,
            targets=(Target("levelled off", "<=", 0.25, on="ratio"),),
            note=f"{len(samples)} samples, every 100 ms (or as the GIL lets the main thread)",
        ),
        Row(
            case=NAME,
            name=f"spool on disk, {label}",
            value=spool,
            unit="MiB",
            baseline=SPOOL_BYTES / 2**20,
            baseline_name="spool_bytes",
            ratio=spool / (SPOOL_BYTES / 2**20),
            targets=(Target("capped", "<=", 1.0, on="ratio"),),
        ),
    ]

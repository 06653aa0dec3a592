"""Case 5: the tracer's memory while the repository is down.

``benchmarks.memory_worker`` emits requests with nothing listening, a memory queue of
QUEUE_BATCHES batches and a spool capped at SPOOL_BYTES: once both are full the tracer must drop
(and count) batches rather than grow. Run twice, as fast as the loop goes and at a service's pace,
each in a fresh subprocess. The memory the configuration bounds is the queue: QUEUE_BATCHES
encoded batches (plus the one being sent and the one being built); the spool is on disk.

Targets (ours; DESIGN.md says "bounded by config"): the RSS growth stays within twice the queue
bound (allocator slack), it has levelled off in the second half of the run, and the spool file
stays under its cap.
"""

from __future__ import annotations

from typing import Any, Final

from benchmarks.harness import CaseResult, Row, Settings, Target
from benchmarks.processes import clean_environment, run_worker

NAME: Final = "memory"
QUEUE_BATCHES: Final = 32
BATCH_EVENTS: Final = 4096
SPOOL_BYTES: Final = 2 * 2**20
#: A safety stop: a worker whose RSS grows past this ends its run early (and says so).
RSS_LIMIT_MIB: Final = 1024
PACED_EVENTS_PER_S: Final = 100_000


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    duration = settings.budget_s / 2
    for label, pace in (("full speed", 0), (f"{PACED_EVENTS_PER_S // 1000} k events/s", 100_000)):
        workdir = settings.workdir / f"memory-{pace}"
        workdir.mkdir()
        params = {
            "workdir": str(workdir),
            "duration_s": duration,
            "pace": pace,
            "queue_batches": QUEUE_BATCHES,
            "batch_events": BATCH_EVENTS,
            "spool_bytes": SPOOL_BYTES,
            "rss_limit_mib": RSS_LIMIT_MIB,
        }
        env = clean_environment(INVOSEQ_SPOOL_DIR=str(workdir / "spool"))
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
    bound = (QUEUE_BATCHES + 2) * measured["batch_bytes"] / 2**20
    growth = max(s["rss_growth_mib"] for s in samples)
    half = samples[len(samples) // 2]["rss_growth_mib"]
    late_growth = samples[-1]["rss_growth_mib"] - half
    buffered = max(s["buffered"] for s in samples)
    rate = measured["events"] / measured["elapsed_s"]
    counters = (
        f"{measured['events']} events in {measured['elapsed_s']:.1f} s ({rate / 1e3:.0f} k/s), "
        f"{measured['dropped']} dropped and counted, {measured['spooled_batches']} batches "
        f"spooled, at most {buffered} events waiting in the threads' buffers"
    )
    spool = max(s["spool_mib"] for s in samples)
    return [
        Row(
            case=NAME,
            name=f"RSS growth, repository down, {label}",
            value=growth,
            unit="MiB",
            baseline=bound,
            baseline_name=f"queue bound: {QUEUE_BATCHES} + 2 batches of {BATCH_EVENTS} events",
            ratio=growth / bound,
            targets=(Target("bounded", "<=", 2.0, on="ratio"),),
            note=counters,
        ),
        Row(
            case=NAME,
            name=f"RSS growth in the second half of the run, {label}",
            value=late_growth,
            unit="MiB",
            baseline=bound,
            baseline_name="queue bound",
            ratio=late_growth / bound,
            targets=(Target("levelled off", "<=", 0.25, on="ratio"),),
            note=f"{len(samples)} RSS samples, every 100 ms",
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

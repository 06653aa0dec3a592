"""Case 2a: events per second from one traced process into the repository, nothing dropped.

sender → ZeroMQ (ipc) → ``cmr serve``'s ROUTER → store, timed from the first recorded event to
the last acknowledgement, against a bare ZeroMQ + msgspec pipe in the same rounds. The
measuring runs in ``benchmarks.throughput_worker`` (a traced process of its own).
"""

from __future__ import annotations

from typing import Final

from benchmarks.harness import CaseResult, Row, Settings, Target, median, median_error, spread
from benchmarks.processes import clean_environment, run_worker

NAME: Final = "throughput"
TARGETS: Final = (Target("first", ">=", 1_000_000), Target("final", ">=", 3_000_000))


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    params = {
        "calls": 50_000 if settings.quick else 200_000,
        "rounds": 3 if settings.quick else 8,
        "min_rounds": 2 if settings.quick else 3,
        "budget_s": settings.budget_s,
        "workdir": str(settings.workdir),
    }
    env = clean_environment(INVOSEQ_SPOOL_DIR=str(settings.workdir / "spool"))
    measured = run_worker(
        "benchmarks.throughput_worker", params, timeout_s=settings.budget_s * 4 + 120, env=env
    )
    series: dict[str, list[float]] = measured["series"]
    events = measured["events_per_chunk"]
    result.raw = measured
    result.noise["raw"] = spread(series["raw"])
    raw = median(series["raw"])
    generation = median(measured["generation"])
    for variant, label in (
        ("sqlite", "SQLite store"),
        ("workers", "SQLite store, --workers 2"),
        ("memory", "memory store"),
    ):
        rate = median(series[variant])
        result.rows.append(
            Row(
                case=NAME,
                name=f"one traced process → cmr serve ({label})",
                value=rate,
                unit="events/s",
                baseline=raw,
                baseline_name="ZeroMQ + msgspec alone, batches of 256",
                ratio=rate / raw,
                targets=TARGETS,
                error=median_error(series[variant]),
                note=(
                    f"{len(series[variant])} bursts of {events} events, timed to the last ack; "
                    "anchor: ZeroMQ + msgspec batches of 256: 3.5 M events/s decoded"
                ),
            )
        )
    totals = measured["totals"]
    result.rows.append(
        Row(
            case=NAME,
            name="events dropped across all bursts (tracer.stats())",
            value=totals["dropped_events"],
            unit="events",
            targets=(Target("none", "<=", 0),),
            note=(
                f"{totals['sent_events']} events acknowledged, "
                f"{totals['spooled_batches']} batches spooled; dropped by variant: "
                + ", ".join(f"{k} {v}" for k, v in measured["dropped_by"].items())
            ),
        )
    )
    result.notes.append(
        f"the traced loop alone recorded {generation / 1e6:.2f} M events/s (median): the "
        "repository, not the tracer, sets the pace when the end-to-end rate is lower"
    )
    return result

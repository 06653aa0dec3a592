"""Case 3: the stack sampler's overhead at 100 Hz on a CPU-bound program with 32 threads.

The headline ratio isolates the sampler: traced-with-sampler against traced-without-sampler,
interleaved chunk by chunk (``benchmarks.sampler_worker``). Beside it: the same against the
untraced program, and the sampler's own accounting of the time its ticks took, which is far less
noisy than a difference of two wall-clock medians.
"""

from __future__ import annotations

from typing import Any, Final

from benchmarks.harness import CaseResult, Row, Settings, Target, median, ratio_error_pct, spread
from benchmarks.processes import clean_environment, run_worker

NAME: Final = "sampler"
TARGETS: Final = (Target("first", "<=", 2.0), Target("final", "<=", 1.0))


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    params = {
        "chunk_s": 0.25 if settings.quick else 0.4,
        "rounds": 40,
        "min_rounds": 4,
        "budget_s": settings.budget_s,
        "workdir": str(settings.workdir),
    }
    env = clean_environment(INVOSEQ_SPOOL_DIR=str(settings.workdir / "spool"))
    measured = run_worker(
        "benchmarks.sampler_worker", params, timeout_s=settings.budget_s * 4 + 120, env=env
    )
    result.raw = measured
    cpu: dict[str, list[float]] = measured["series"]
    wall: dict[str, list[float]] = measured["wall"]
    for name, values in cpu.items():
        result.noise[f"{name} (CPU)"] = spread(values)
        result.noise[f"{name} (wall)"] = spread(wall[name])
    untraced, traced, sampled = (median(cpu[k]) for k in ("untraced", "traced", "sampled"))
    result.rows.append(
        _with_without(
            "sampler at 100 Hz, 32 CPU-bound threads: with / without sampler (CPU)",
            measured,
            ("sampled", "traced"),
            "traced, sampler off, CPU per chunk",
            anchor="; anchor: py-spy 2-4 %",
        )
    )
    result.rows.append(
        Row(
            case=NAME,
            name="traced with sampler vs untraced (all costs, CPU)",
            value=100 * (sampled / untraced - 1),
            unit="%",
            baseline=untraced,
            baseline_name="untraced, CPU per chunk",
            baseline_unit="s",
            ratio=sampled / untraced,
            error=ratio_error_pct(cpu["sampled"], cpu["untraced"]),
            note=(
                f"traced without sampler vs untraced: {100 * (traced / untraced - 1):+.2f} % CPU; "
                f"with sampler vs untraced in wall time: {_ratio_text(wall, 'sampled', 'untraced')}"
            ),
        )
    )
    result.rows.append(_accounting_row(measured["accounting"]))
    result.rows.append(
        _with_without(
            "sampler at 100 Hz, main thread alone (samples itself): with / without (CPU)",
            measured,
            ("main sampled", "main traced"),
            "main thread traced, sampler off, CPU per chunk",
        )
    )
    return result


def _with_without(
    name: str, measured: dict[str, Any], pair: tuple[str, str], baseline_name: str, anchor: str = ""
) -> Row:
    """A row of CPU per chunk with the sampler against without it (``pair``: the two variants)."""
    cpu: dict[str, list[float]] = measured["series"]
    wall: dict[str, list[float]] = measured["wall"]
    sampled, unsampled = pair
    ratio = median(cpu[sampled]) / median(cpu[unsampled])
    return Row(
        case=NAME,
        name=name,
        value=100 * (ratio - 1),
        unit="%",
        baseline=median(cpu[unsampled]),
        baseline_name=baseline_name,
        baseline_unit="s",
        ratio=ratio,
        targets=TARGETS,
        error=ratio_error_pct(cpu[sampled], cpu[unsampled]),
        note=(
            f"{len(cpu[sampled])} chunks each; median of per-round ratios "
            f"{_paired(cpu, sampled, unsampled):.4f}; in wall time: "
            f"{_ratio_text(wall, sampled, unsampled)}{anchor}"
        ),
    )


def _paired(series: dict[str, list[float]], a: str, b: str) -> float:
    """The median of the ratios within each round: immune to drift between rounds."""
    return median([x / y for x, y in zip(series[a], series[b], strict=True)])


def _ratio_text(series: dict[str, list[float]], a: str, b: str) -> str:
    ratio = median(series[a]) / median(series[b])
    return f"{100 * (ratio - 1):+.2f} % (per-round median {_paired(series, a, b):.4f})"


def _accounting_row(accounting: list[dict[str, Any]]) -> Row:
    elapsed = sum(a["wall_s"] for a in accounting)
    cost_s = sum(a["cost_ns"] for a in accounting) / 1e9
    ticks = sum(a["ticks"] for a in accounting)
    late = sum(a["late_ticks"] for a in accounting)
    per_tick_us = 1e6 * cost_s / ticks if ticks else float("nan")
    # The sampler paces itself from 10 ms (tracer._sampling.pacing): how far it had to go in any
    # chunk.
    longest_ms = max((a.get("longest_interval_ns", 0) for a in accounting), default=0) / 1e6
    paced = [a.get("longest_interval_ns", 0) > 10_000_000 for a in accounting].count(True)
    return Row(
        case=NAME,
        name="sampler's own time in ticks / wall time of the chunks (its accounting)",
        value=100 * cost_s / elapsed if elapsed else float("nan"),
        unit="%",
        targets=TARGETS,
        note=(
            f"{ticks} ticks ({late} late) in {len(accounting)} sampled chunks, "
            f"{per_tick_us:.0f} µs per tick; interval lengthened in {paced} chunks, "
            f"longest {longest_ms:.1f} ms"
        ),
    )

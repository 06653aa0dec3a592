"""Case ``reads``: ``cmr show`` and ``cmr profile`` of a million calls with samples (issue 33).

Two SQLite repositories, each one sequence of 1 + 1,000 * (1 + 999) calls with the stack samples
the sampler would have sent at its default interval (``benchmarks/sampled.py``): *wide* (the
root's 1,000 calls each call 999 leaves) and *deep* (each of them recurses 999 calls deep). Each
is built by a child process, so this one stays small and a command's peak RSS is its own. The
commands run as a user runs them, with their default options (``cmr profile`` merges the
samples in), each in a fresh ``python -m cmr`` with the output thrown away, interleaved with
``python -m cmr --help`` (the start-up floor, the median of five runs a round) in the same
rounds. Targets, as ratios to the
floor: ``show`` ≤ 12x, ``profile`` ≤ 19x, and each command's peak RSS ≤ 300 MiB. Each row's note
gives the same ratio in CPU time (the child's user and system time), which a loaded machine moves
less than the wall time of a 0.1 s floor. ``--quick`` makes 100 * 99 calls instead.
"""

from __future__ import annotations

import functools
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from benchmarks.harness import CaseResult, Row, Settings, Target, interleave, median, spread
from benchmarks.processes import clean_environment
from benchmarks.views import Commands

NAME: Final = "reads"
SHAPES: Final = ("wide", "deep")
#: Runs of the floor a round (their median is the round's value).
FLOOR_RUNS: Final = 5
#: Issue 33, goal 4: ratios to ``cmr --help`` in the same rounds, and the peak RSS.
TARGETS: Final = {
    "show": Target("show ≤ 12x floor", "<=", 12.0, on="ratio"),
    "profile": Target("profile ≤ 19x floor", "<=", 19.0, on="ratio"),
}
PEAK_MIB: Final = 300.0
ROOT: Final = Path(__file__).resolve().parent.parent


def _build(db: Path, shape: str, outer: int, inner: int) -> tuple[str, float]:
    """The repository, built by a child process: (the sequence's id, seconds)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.sampled", str(db), shape, str(outer), str(inner)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=clean_environment(),
    )
    return done.stdout.strip(), time.perf_counter() - started


def _median_of(run: Callable[[], float], times: int) -> float:
    """The median wall time of ``times`` runs of ``run``."""
    return median([run() for _ in range(times)])


def _cpu_timed(run: Callable[[], float], cpu: list[float]) -> float:
    """``run``'s wall time; its child's CPU time (user and system) appended to ``cpu``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    took = run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return took


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    outer, inner = (100, 99) if settings.quick else (1000, 999)
    calls = 1 + outer * (1 + inner)
    commands: dict[str, Commands] = {}
    variants: dict[str, Callable[[], float]] = {}
    for shape in SHAPES:
        db = settings.workdir / f"reads-{shape}.sqlite"
        seq, took = _build(db, shape, outer, inner)
        result.notes.append(f"{shape}: {calls:,} calls built in {took:.1f} s")
        commands[shape] = Commands(db)
        for command in TARGETS:
            variants[f"{shape} {command}"] = functools.partial(
                commands[shape].timed, command, command, seq
            )
    # The floor is a 0.03-0.06 s command whose single runs move by half on a shared machine, and
    # every ratio divides by it: each round takes the median of FLOOR_RUNS runs.
    variants["floor"] = functools.partial(
        _median_of, functools.partial(commands[SHAPES[0]].timed, "floor", "--help"), FLOOR_RUNS
    )
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    variants = {
        name: functools.partial(_cpu_timed, timed, cpu[name]) for name, timed in variants.items()
    }
    series = interleave(
        variants, rounds=3, min_rounds=2, budget_s=settings.budget_s, warmup=settings.quick
    )
    result.raw = {"calls": calls, **series, "cpu_s": cpu}
    result.noise["floor"] = spread(series["floor"])
    floor = median(series["floor"])
    floor_cpu = median(cpu["floor"][-len(series["floor"]) :]) / FLOOR_RUNS
    for shape in SHAPES:
        peaks = commands[shape].peak_mib
        result.raw[f"{shape} peak_rss_mib"] = peaks
        for command, target in TARGETS.items():
            took = median(series[f"{shape} {command}"])
            spent = median(cpu[f"{shape} {command}"][-len(series[f"{shape} {command}"]) :])
            result.rows.append(
                Row(
                    case=NAME,
                    name=f"cmr {command}, {shape} sequence of {calls:,} calls with samples",
                    value=took,
                    unit="s",
                    baseline=floor,
                    baseline_name="python -m cmr --help (start-up floor)",
                    ratio=took / floor,
                    targets=(target,),
                    note=f"CPU {spent:.2f} s, {spent / floor_cpu:.1f}x the floor's "
                    f"{floor_cpu:.3f} s",
                )
            )
            if command in peaks:
                result.rows.append(
                    Row(
                        case=NAME,
                        name=f"cmr {command}, {shape} sequence: peak RSS",
                        value=peaks[command],
                        unit="MiB",
                        targets=(Target("peak ≤ 300 MiB", "<=", PEAK_MIB),),
                    )
                )
    return result

"""A million calls a second, every one kept (issue 33, goal 1): a program pacing a million
traced calls a second under ``tracer run`` at its defaults (the embedded repository on SQLite,
the sampler on), for a fixed count; the share of its events the tracer dropped.

The program is ``benchmarks/million_program.py`` (roots of 1,000 nested calls, spinning between
roots to hold the pace, as a busy program holds its core): 10 M calls a run, 4 M with
``--quick``. A dropped event is a call the tracer could not keep: the memory bound refused it
while the repository lagged (docs/performance.md, "A million calls a second").
"""

from __future__ import annotations

import json
import sys
import time
from typing import Final

from benchmarks.harness import CaseResult, Row, Settings, Target, median, spread
from benchmarks.processes import clean_environment, run_reporting

NAME: Final = "million"
CALLS: Final = 1_000  # a root's nested calls
NOTHING_DROPPED: Final = Target("final", "<=", 0.0)
PACE: Final = Target("pace", ">=", 900_000)  # the program held (about) its pace


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    roots = 4_000 if settings.quick else 10_000
    program = json.dumps({"roots": roots, "calls": CALLS})
    dropped: list[float] = []
    pace: list[float] = []
    env = clean_environment(INVOSEQ_SPOOL_DIR=str(settings.workdir / "spool"))
    deadline = time.monotonic() + settings.budget_s
    while len(dropped) < 2 or (time.monotonic() < deadline and len(dropped) < 5):
        database = settings.workdir / f"million-{len(dropped)}.sqlite"
        command = [sys.executable, "-m", "tracer", "run", "--db", str(database), "--no-report"]
        command += ["--include", "benchmarks.million_program.*"]
        command += ["-m", "benchmarks.million_program", program]
        report = run_reporting(command, "tracer run", timeout_s=300, env=env)
        dropped.append(100 * report["dropped_events"] / report["events"])
        pace.append(report["calls_per_s"])
        database.unlink(missing_ok=True)
    result.raw = {"dropped_percent": dropped, "calls_per_s": pace}
    note = f"{len(dropped)} runs of {roots * (CALLS + 1):,} calls; each run: " + ", ".join(
        f"{share:.2f} %" for share in dropped
    )
    result.noise["dropped"] = spread(dropped)
    result.rows.append(
        Row(
            NAME,
            "share of the events dropped, worst run",
            max(dropped),
            "%",
            targets=(NOTHING_DROPPED,),
            note=note,
        )
    )
    result.rows.append(
        Row(NAME, "share of the events dropped, median run", median(dropped), "%", note=note)
    )
    result.rows.append(
        Row(
            NAME,
            "calls a second the program made, median run",
            median(pace),
            "calls/s",
            targets=(PACE,),
        )
    )
    return result

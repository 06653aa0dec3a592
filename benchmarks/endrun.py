"""The end of a run (issue 33, goal 5): the wall time ``tracer run`` spends after the program's
last line until it exits, per million events, and where it goes.

The program is the real one of ``benchmarks/real.py`` (sqlparse, a few passes: about 1.8 M
events); it prints its result line as its last act. Three ways to run it, in rounds: the default
(the embedded repository, SQLite, and the report: the slowest sequences and the tree of the
slowest), ``--no-report`` (the same without the report), and ``--endpoint`` to a ``cmr serve``
of the case's own (no embedded repository: the tracer's final flush alone). The differences say
where the time goes: the final flush, the embedded repository's ingest of what is left and its
stop, the report.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from benchmarks.harness import CaseResult, Row, Settings, median, spread
from benchmarks.processes import (
    RESULT_PREFIX,
    clean_environment,
    run_reporting,
    start_reporting,
    stop,
)
from cmr.defaults import READY_PREFIX

NAME: Final = "endrun"
ROOT: Final = Path(__file__).resolve().parent.parent
VARIANTS: Final = ("report", "no report", "external repository")


def _after_program(command: list[str], env: dict[str, str]) -> float:
    """Seconds from the program's result line to the exit of ``tracer run``."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if line.startswith(RESULT_PREFIX):
                ended = time.monotonic()
                break
        else:
            raise RuntimeError(f"tracer run exited {process.wait(60)} without a result")
        process.stdout.read()
        process.wait(300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"tracer run exited {process.returncode}")
    return time.monotonic() - ended


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    passes = 3 if settings.quick else 6
    program = json.dumps({"passes": passes, "statements": 12, "stats": False})
    counted = json.dumps({"passes": passes, "statements": 12})
    socket = settings.workdir / "cmr.sock"
    serve = [sys.executable, "-m", "cmr", "serve", "--bind", f"ipc://{socket}", "--memory"]
    server, endpoint = start_reporting(serve, READY_PREFIX)
    env = clean_environment(INVOSEQ_SPOOL_DIR=str(settings.workdir / "spool"))
    tail: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    try:
        base = [sys.executable, "-m", "tracer", "run", "--include", "sqlparse.*"]
        module = ["-m", "benchmarks.real_program"]
        counting = [*base, "--endpoint", endpoint, *module, counted]
        events = run_reporting(counting, "tracer run", timeout_s=300, env=env)["sent_events"]
        deadline = time.monotonic() + settings.budget_s
        rounds = 0
        while rounds < 2 or (time.monotonic() < deadline and rounds < 6):
            for variant in VARIANTS:
                database = settings.workdir / f"run-{rounds}-{len(tail[variant])}.sqlite"
                options = {
                    "report": ["--db", str(database)],
                    "no report": ["--db", str(database), "--no-report"],
                    "external repository": ["--endpoint", endpoint],
                }[variant]
                tail[variant].append(_after_program([*base, *options, *module, program], env))
            rounds += 1
    finally:
        stop(server)
    result.raw = {"after_program_s": tail, "events": events}
    per_million = 1e6 / events
    for variant in VARIANTS:
        result.noise[variant] = spread(tail[variant])
        result.rows.append(
            Row(
                NAME,
                f"after the program, per million events: {variant}",
                median(tail[variant]) * per_million,
                "s",
                note=f"{len(tail[variant])} runs of {events:,} events",
            )
        )
    return result

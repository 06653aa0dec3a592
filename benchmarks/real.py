"""A real program's calls (issue 33, goal 1): sqlparse formatting a SQL script
(``benchmarks.real_program``: generators, methods, keyword calls, about 150 k traced calls and
340 k profiled entries a pass), bare, under ``tracer run --include 'sqlparse.*'`` sending to a
``cmr serve`` of the case's own on the same machine (SQLite, its default store; the sampler at its
default), and under VizTracer (``--ignore_c_function``, sqlparse's files and the program's own,
the program run as a script so that VizTracer records what it sees), in rounds whose order
rotates.

Each run times its passes from inside; a run's figure is the median of its passes after the
first (imports and caches warm), in CPU time of the whole process (every thread, so the tracer's
sender and sampler are in it; a busy machine's waits for a core are not). A tool's cost per entry
is ``(its pass - the bare pass) / its entries per pass``, both passes from the same round: the
tracer's entries are the calls it recorded (its ``stats()``: events sent over two), VizTracer's
the calls and generator resumes a profile function sees in sqlparse's files (a run whose JSON
holds fewer fails the case rather than report a cost VizTracer did not pay). The rows: each
tool's cost per entry, their ratio (round by round, then the median), the cost of the same
pass's work (the tracer's extra time over VizTracer's), and the share of the tracer's events
dropped (the target: none).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Final

import sqlparse

from benchmarks.harness import CaseResult, Row, Settings, Target, median, spread
from benchmarks.processes import clean_environment, run_reporting, start_reporting, stop
from cmr.defaults import READY_PREFIX

NAME: Final = "real"
ROOT: Final = Path(__file__).resolve().parent.parent
PROGRAM: Final = Path(__file__).resolve().parent / "real_program.py"
VIZ_OUTPUT: Final = "viz.json"
#: The share of the counted entries VizTracer must have recorded for its figure to count (the
#: two counts differ by a few dozen a pass: calls the profile function and VizTracer see apart).
VIZ_RECORDED: Final = 0.99
STATEMENTS: Final = 12  # about 0.3 s a bare pass here
TOOLS: Final = ("bare", "tracer", "viztracer")
VIZTRACER_RATIO: Final = Target("final", "<=", 0.6)
NOTHING_DROPPED: Final = Target("final", "<=", 0.0)


def _command(tool: str, workdir: Path, params: dict[str, Any]) -> list[str]:
    program = ["-m", "benchmarks.real_program", json.dumps(params)]
    if tool == "tracer":
        return [sys.executable, "-m", "tracer", "run", "--include", "sqlparse.*", *program]
    if tool == "viztracer":
        # The program runs as a script, its own file included: VizTracer leaves out everything
        # called from a frame it does not include, and under `-m` that is runpy's frozen code
        # (then it records nothing, at the cost of a hook that skips every event).
        package = str(Path(sqlparse.__file__).parent)
        return [
            sys.executable, "-m", "viztracer", "--quiet", "--ignore_c_function",
            "--include_files", package, str(PROGRAM), "--tracer_entries", "10000000",
            "-o", str(workdir / VIZ_OUTPUT), str(PROGRAM), json.dumps(params),
        ]  # fmt: skip
    return [sys.executable, *program]


def _viztracer_entries(output: Path) -> int:
    """The complete calls VizTracer wrote to ``output`` (its JSON's ``"ph": "X"`` events)."""
    return output.read_bytes().count(b'"ph": "X"')


def _run(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    return run_reporting(command, " ".join(command[2:5]), timeout_s=300, env=env)


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    passes = 4 if settings.quick else 6
    params = {"passes": passes, "statements": STATEMENTS}
    database = settings.workdir / "real.sqlite"
    socket = settings.workdir / "cmr.sock"
    serve = [sys.executable, "-m", "cmr", "serve", "--bind", f"ipc://{socket}"]
    serve += ["--db", str(database)]
    server, endpoint = start_reporting(serve, READY_PREFIX)
    env = clean_environment(
        INVOSEQ_ENDPOINT=endpoint,
        INVOSEQ_SPOOL_DIR=str(settings.workdir / "spool"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    entries = _run(_command("bare", settings.workdir, {**params, "count": True}), env)["entries"]
    pass_s: dict[str, list[float]] = {tool: [] for tool in TOOLS}
    tracer_entries: list[float] = []
    dropped: list[float] = []
    viz_recorded: list[int] = []
    try:
        deadline = time.monotonic() + settings.budget_s
        rounds = 0
        while rounds < 2 or (time.monotonic() < deadline and rounds < 8):
            order = TOOLS[rounds % 3 :] + TOOLS[: rounds % 3]
            for tool in order:
                done = _run(_command(tool, settings.workdir, params), env)
                pass_s[tool].append(median(done["passes_cpu_s"][1:]))
                if tool == "viztracer":
                    viz_recorded.append(_viztracer_entries(settings.workdir / VIZ_OUTPUT))
                    if viz_recorded[-1] < entries * passes * VIZ_RECORDED:
                        raise RuntimeError(
                            f"VizTracer recorded {viz_recorded[-1]} entries of the"
                            f" {entries * passes} its passes made: its figure would not be its cost"
                        )
                if tool == "tracer":
                    recorded = done["sent_events"] + done["dropped_events"]
                    tracer_entries.append(done["sent_events"] / 2 / passes)
                    dropped.append(100 * done["dropped_events"] / recorded if recorded else 0.0)
            rounds += 1
    finally:
        stop(server)
    result.raw = {
        "pass_s": pass_s,
        "tracer_entries": tracer_entries,
        "viz_entries": entries,
        "viz_recorded": viz_recorded,
    }
    for tool in TOOLS:
        result.noise[f"{tool} pass"] = spread(pass_s[tool])
    bare = pass_s["bare"]
    ours = [
        (t - b) / n * 1e9 for t, b, n in zip(pass_s["tracer"], bare, tracer_entries, strict=True)
    ]
    theirs = [(v - b) / entries * 1e9 for v, b in zip(pass_s["viztracer"], bare, strict=True)]
    ratios = [o / t for o, t in zip(ours, theirs, strict=True) if t > 0]
    extra = [
        (t - b) / (v - b)
        for t, v, b in zip(pass_s["tracer"], pass_s["viztracer"], bare, strict=True)
    ]
    note = f"{len(bare)} rounds; bare pass median {median(bare) * 1e3:.0f} ms"
    result.rows += [
        Row(NAME, "tracer: ns per recorded call", median(ours), "ns",
            note=f"{median(tracer_entries):,.0f} calls a pass; {note}"),
        Row(NAME, "VizTracer: ns per entry", median(theirs), "ns",
            note=f"{entries:,} entries a pass"),
        Row(NAME, "tracer / VizTracer, per entry (round by round)", median(ratios), "x",
            ratio=median(ratios), targets=(VIZTRACER_RATIO,)),
        Row(NAME, "tracer / VizTracer, time added to the same pass", median(extra), "x",
            ratio=median(extra)),
        Row(NAME, "tracer: share of events dropped", max(dropped), "%",
            targets=(NOTHING_DROPPED,), note="the worst run"),
    ]  # fmt: skip
    result.rows += _floor_rows(settings, env, median(theirs))
    return result


#: How the interpreter tells the tracer of a call: what the floor rows measure alone.
_TOLD: Final = "injected hooks" if sys.version_info < (3, 12) else "sys.monitoring"


def _floor_rows(settings: Settings, env: dict[str, str], viz_per_entry: float) -> list[Row]:
    """What telling a tool of each traced call alone adds to it (benchmarks/real_floor.py: no-op
    hooks, injected on 3.11, sys.monitoring's on 3.12+), and that over VizTracer's cost per
    entry: a floor under the per-entry ratio of any tool the interpreter tells so."""
    params = {"statements": STATEMENTS, "floor": 5 if settings.quick else 11}
    found = _run(_command("bare", settings.workdir, params), env)
    ratio = found["floor_ns"] / viz_per_entry
    below = " (the ratio's target is below it)" if ratio > VIZTRACER_RATIO.limit else ""
    return [
        Row(NAME, f"{_TOLD} alone, doing nothing: ns per traced call", found["floor_ns"],
            "ns", note=f"{found['starts']:,.0f} traced calls a pass, in the program's thread"),
        Row(NAME, f"{_TOLD} alone / VizTracer, per entry", ratio, "x", ratio=ratio,
            note=f"the floor under the tracer's per-entry ratio{below}"),
    ]  # fmt: skip

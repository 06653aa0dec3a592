"""A traced loop beside another tool (issue 32): under ``coverage run``, under VizTracer and under
a ``sys.settrace`` function, against the same loop untraced under the same tool (and, for
scale, the two alone).

Each run is a process of its own (``benchmarks.beside_program``) that times its loop from inside,
so the tool's start-up and its report at exit are left out; the two variants of a tool
alternate, round after round, and the ratio of their medians is the row. The traced variant
sends to a ``cmr serve --memory`` of the case's own, as a program with a repository listening.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Final

from benchmarks.harness import CaseResult, Row, Settings, median, ratio_error_pct, spread
from benchmarks.processes import clean_environment, run_reporting, start_reporting, stop
from cmr.defaults import READY_PREFIX

NAME: Final = "beside"
#: Calls per run: a few tenths of a second under each tool on this machine.
CALLS: Final = {"none": 100_000, "coverage": 100_000, "coverage sysmon": 100_000}
CALLS["viztracer"] = 100_000
SETTRACE_CALLS: Final = 30_000


def _command(tool: str, workdir: Path, params: dict[str, Any]) -> list[str]:
    program = ["-m", "benchmarks.beside_program", json.dumps(params)]
    if tool.startswith("coverage"):
        return [sys.executable, "-m", "coverage", "run", f"--data-file={workdir / 'cov'}", *program]
    if tool == "viztracer":
        output = str(workdir / "viz.json")
        return [sys.executable, "-m", "viztracer", "--quiet", "-o", output, *program]
    return [sys.executable, *program]


def _once(tool: str, variant: str, settings: Settings, env: dict[str, str]) -> float:
    calls = SETTRACE_CALLS if tool == "sys.settrace" else CALLS[tool]
    params = {"variant": variant, "calls": calls, "settrace": tool == "sys.settrace"}
    command = _command(tool, settings.workdir, params)
    loop_s: float = run_reporting(command, f"{tool} {variant}", timeout_s=120, env=env)["loop_s"]
    return loop_s


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    tools = ["none", "coverage", "viztracer", "sys.settrace"]  # none: the same loop alone
    if sys.version_info >= (3, 12):
        tools.insert(1, "coverage sysmon")
    socket = settings.workdir / "cmr.sock"
    serve = [sys.executable, "-m", "cmr", "serve", "--bind", f"ipc://{socket}", "--memory"]
    server, endpoint = start_reporting(serve, READY_PREFIX)
    series: dict[str, list[float]] = {}
    try:
        env = clean_environment(
            INVOSEQ_ENDPOINT=endpoint, INVOSEQ_SPOOL_DIR=str(settings.workdir / "spool")
        )
        deadline = time.monotonic() + settings.budget_s
        rounds = 0
        while rounds < 2 or (time.monotonic() < deadline and rounds < 10):
            for tool in tools:
                tool_env = dict(env, COVERAGE_CORE="sysmon" if "sysmon" in tool else "ctrace")
                for variant in ("untraced", "traced"):
                    value = _once(tool, variant, settings, tool_env)
                    series.setdefault(f"{tool} {variant}", []).append(value)
            rounds += 1
    finally:
        stop(server)
    result.raw = {"series": series}
    for tool in tools:
        traced, untraced = series[f"{tool} traced"], series[f"{tool} untraced"]
        result.noise[f"{tool} traced"] = spread(traced)
        result.noise[f"{tool} untraced"] = spread(untraced)
        ratio = median(traced) / median(untraced)
        result.rows.append(
            Row(
                case=NAME,
                name=f"traced loop under {tool}: traced / untraced, same tool",
                value=ratio,
                unit="x",
                baseline=median(untraced),
                baseline_name=f"untraced loop under {tool}",
                baseline_unit="s",
                ratio=ratio,
                error=ratio * ratio_error_pct(traced, untraced) / 100,
                note=f"{len(traced)} runs each; traced median {median(traced):.3f} s",
            )
        )
    return result

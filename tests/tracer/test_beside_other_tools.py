"""A traced loop beside another tool's hook on the main thread: coverage (its C tracer, and its
sys.monitoring core from 3.12), a ``sys.settrace`` function (what pdb and debugpy install),
cProfile's profile hook, VizTracer's and pyinstrument's. Each run finishes (the main thread's
sampling tick once spun for ever under a trace function: ``tracer/_sampling/_main_ticks.c``) and
records what the same loop records alone.

Each program is a real process, bounded by a timeout, with the sampler ticking every
millisecond, unpaced, so that many ticks fall inside the loop; the loop's work is fixed by count.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.support import run_program, write_script

pytestmark = pytest.mark.system

CALLS = 20_000

PROGRAM = """
import collections, json, sys
from tracer import traced
from tracer.testing import capture

@traced
def leaf(i):
    return i * 2

@traced
def work(n):
    total = 0
    for i in range(n):
        total += leaf(i)
    return total

def main():
    with capture(sample_interval_ms=1, sample_pacing=False) as trace:
        result = work(int(sys.argv[2]))
        calls = collections.Counter(i.name.rsplit(".", 1)[-1] for i in trace.invocations())
    return {"result": result, "calls": dict(calls)}

tool = sys.argv[1]
if tool == "alone":
    outcome = main()
elif tool == "settrace":
    lines = collections.Counter()
    def trace(frame, event, arg):  # a debugger's way: a local trace function on every frame
        lines[frame.f_code.co_filename] += 1
        return trace
    sys.settrace(trace)
    try:
        outcome = main()
    finally:
        sys.settrace(None)
elif tool == "cprofile":
    import cProfile
    profile = cProfile.Profile()
    outcome = profile.runcall(main)
elif tool.startswith("coverage"):
    import coverage
    cov = coverage.Coverage(data_file=None)
    cov.start()
    try:
        outcome = main()
    finally:
        cov.stop()
elif tool == "viztracer":
    from viztracer import VizTracer
    with VizTracer(output_file=sys.argv[3], verbose=0, tracer_entries=2_000_000):
        outcome = main()
elif tool == "pyinstrument":
    from pyinstrument import Profiler
    with Profiler(interval=0.001):
        outcome = main()
print(json.dumps(outcome))
"""

TOOLS = ["settrace", "cprofile", "coverage", "viztracer", "pyinstrument"]
if sys.version_info >= (3, 12):
    TOOLS.append("coverage-sysmon")
#: The tools that are packages of their own (in the test extras).
MODULES = {"coverage": "coverage", "coverage-sysmon": "coverage"} | {
    tool: tool for tool in ("viztracer", "pyinstrument")
}


def run(tmp_path: Path, tool: str) -> dict[str, object]:
    script = write_script(tmp_path / "loop.py", PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INVOSEQ_", "COVERAGE_"))}
    env["INVOSEQ_SPOOL_DIR"] = str(tmp_path / "spool")
    if tool == "coverage-sysmon":
        env["COVERAGE_CORE"] = "sysmon"
    elif tool == "coverage":
        env["COVERAGE_CORE"] = "ctrace"
    command = [sys.executable, str(script), tool, str(CALLS), str(tmp_path / "viz.json")]
    result = run_program(command, env=env, cwd=tmp_path, timeout_s=90)
    assert result.returncode == 0, result.stderr
    outcome: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return outcome


@pytest.mark.parametrize("tool", TOOLS)
def test_a_traced_loop_under_another_tools_hook_finishes_with_the_same_record(
    tmp_path: Path, tool: str
) -> None:
    if tool in MODULES:
        pytest.importorskip(MODULES[tool])
    alone = run(tmp_path, "alone")
    assert alone == {"result": CALLS * (CALLS - 1), "calls": {"work": 1, "leaf": CALLS}}
    assert run(tmp_path, tool) == alone

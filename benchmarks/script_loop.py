"""Case ``script``: a script's own module-level code under ``tracer run``, against bare.

``tracer run script.py`` runs the script's module code with a local namespace of its own, so
that the functions it defines are traced the moment they are defined (``tracer/run/autowrap.py``,
``defining_namespace``); each name that module-level code reads or writes goes through it. The
script here defines a function (without one the namespace is not used) and runs a module-level
loop of ``ITERATIONS`` iterations that reads and writes module names and a builtin, timing the
loop itself in CPU time; it runs bare and under ``tracer run`` (its embedded repository, no
report), in rounds whose order reverses every other round. The row: the traced loop's median
over the bare one's. Written in Python the namespace made this loop about ten times slower; the
C namespace (``tracer/run/_namespace.c``) is the one measured, unless ``INVOSEQ_PURE=1``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from benchmarks.harness import CaseResult, Row, Settings, Target, interleave, median, spread
from benchmarks.processes import RESULT_PREFIX, clean_environment

NAME: Final = "script"
ITERATIONS: Final = 1_000_000
TARGET: Final = Target("ours", "<=", 1.5, on="ratio")

SCRIPT: Final = f"""\
import sys, time


def unused():
    return None


started = time.process_time()
total = 0
for i in range({ITERATIONS}):
    total += i
    last = abs(i)
took = time.process_time() - started
print("{RESULT_PREFIX}" + str(took), flush=True)
"""


def _timed(command: list[str], workdir: Path) -> Callable[[], float]:
    env = clean_environment()

    def chunk() -> float:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=120, env=env, cwd=workdir, check=False
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr[-500:]}")
        return float(lines[-1][len(RESULT_PREFIX) :])

    return chunk


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    script = settings.workdir / "module_loop.py"
    script.write_text(SCRIPT)
    db = settings.workdir / "script.sqlite"
    tracer = [sys.executable, "-m", "tracer", "run", "--no-report", "--db", str(db)]
    series = interleave(
        {
            "bare": _timed([sys.executable, str(script)], settings.workdir),
            "traced": _timed([*tracer, str(script)], settings.workdir),
        },
        rounds=5 if settings.quick else 15,
        min_rounds=3,
        budget_s=settings.budget_s,
    )
    result.raw = dict(series)
    for label, values in series.items():
        result.noise[label] = spread(values)
    bare, traced = median(series["bare"]), median(series["traced"])
    result.rows.append(
        Row(
            case=NAME,
            name=f"a script's module-level loop of {ITERATIONS:,} iterations under tracer run",
            value=traced,
            unit="s",
            baseline=bare,
            baseline_name="the same loop bare, same rounds",
            ratio=traced / bare,
            targets=(TARGET,),
            note="CPU time of the loop alone, timed inside the script",
        )
    )
    return result

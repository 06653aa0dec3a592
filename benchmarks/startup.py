"""Case ``startup``: what starting costs, against ``python -c pass`` in the same run (issue 33).

Five commands, each a fresh interpreter, run one after the other in rounds whose order reverses
every other round: ``python -c pass`` (the baseline), ``python -c "import tracer"``, ``cmr
--help``, ``cmr ls --db SMALL.sqlite``, a repository of one short traced run (``tracer run``
of a tiny script, made once before the rounds), and ``tracer run`` of that script itself (its
embedded repository and report; a row without a target). ``cmr`` is the console script beside this
interpreter, as a user runs it (``python -m cmr`` where there is none). Each row is a command's
median wall time and its ratio to the baseline's median. The packages' bytecode is compiled
first (``compileall``), as ``pip install`` leaves it: with ``PYTHONDONTWRITEBYTECODE`` set, a
source file newer than its ``.pyc`` would otherwise be compiled again at every start.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from benchmarks.harness import (
    CaseResult,
    Row,
    Settings,
    Target,
    interleave,
    median,
    ratio_error_pct,
    spread,
)
from benchmarks.processes import clean_environment

NAME: Final = "startup"

SCRIPT: Final = """\
def leaf(n):
    return n * 2


def handle(n):
    return sum(leaf(i) for i in range(n))


for k in range(3):
    handle(5)
"""

#: The command's label -> (final target, first target), ratios to ``python -c pass``.
TARGETS: Final = {
    'python -c "import tracer"': (1.5, 3.0),
    "cmr --help": (2.0, None),
    "cmr ls (a small repository)": (3.0, 5.0),
}


#: ``tracer run`` of the tiny script, its embedded repository and its report: no target of the
#: issue's, measured for what every run pays before and after the program.
RUN_LABEL: Final = "tracer run (a tiny script)"


def _tracer() -> list[str]:
    script = Path(sys.executable).with_name("tracer")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tracer"]


def _cmr() -> list[str]:
    script = Path(sys.executable).with_name("cmr")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cmr"]


def _small_repository(workdir: Path) -> Path:
    """A repository of one short traced run: three sequences of a few calls."""
    db = workdir / "small.sqlite"
    program = workdir / "tiny.py"
    program.write_text(SCRIPT)
    subprocess.run(
        [*_tracer(), "run", "--db", str(db), "--no-report", str(program)],
        check=True,
        capture_output=True,
        timeout=120,
        env=clean_environment(),
        cwd=workdir,
    )
    return db


def _timed(argv: Sequence[str], workdir: Path) -> Callable[[], float]:
    env = clean_environment()

    def chunk() -> float:
        started = time.perf_counter()
        done = subprocess.run(
            list(argv), capture_output=True, timeout=60, env=env, cwd=workdir, check=False
        )
        took = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
        return took

    return chunk


def _compile_packages() -> None:
    import compileall
    import importlib.util

    for name in ("invoseq", "tracer", "cmr"):
        spec = importlib.util.find_spec(name)
        for folder in spec.submodule_search_locations or () if spec else ():
            compileall.compile_dir(folder, quiet=1)


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    _compile_packages()
    db = _small_repository(settings.workdir)
    python = sys.executable
    commands = {
        "python -c pass": [python, "-c", "pass"],
        'python -c "import tracer"': [python, "-c", "import tracer"],
        "cmr --help": [*_cmr(), "--help"],
        "cmr ls (a small repository)": [*_cmr(), "--db", str(db), "ls"],
        RUN_LABEL: [*_tracer(), "run", "--db", str(settings.workdir / "run.sqlite"), "tiny.py"],
    }
    series = interleave(
        {label: _timed(argv, settings.workdir) for label, argv in commands.items()},
        rounds=10 if settings.quick else 40,
        min_rounds=5,
        budget_s=settings.budget_s,
    )
    result.raw = dict(series)
    bare = median(series["python -c pass"])
    result.noise["python -c pass"] = spread(series["python -c pass"])
    result.notes.append(f"python -c pass: {bare * 1000:.1f} ms (median of this run)")
    for label in (*TARGETS, RUN_LABEL):
        took = median(series[label])
        targets: list[Target] = []
        if label in TARGETS:
            final, first = TARGETS[label]
            targets = [Target("final", "<=", final, on="ratio")]
            if first is not None:
                targets.insert(0, Target("first", "<=", first, on="ratio"))
        error = ratio_error_pct(series[label], series["python -c pass"])
        whole = "; the whole command, its repository and report" if label == RUN_LABEL else ""
        result.rows.append(
            Row(
                case=NAME,
                name=label,
                value=took,
                unit="s",
                baseline=bare,
                baseline_name="python -c pass, same rounds",
                ratio=took / bare,
                targets=tuple(targets),
                note=f"{len(series[label])} runs; ratio ±{error:.1f} %{whole}",
            )
        )
    return result


if __name__ == "__main__":
    from benchmarks.processes import private_directory

    with private_directory("invoseq-startup-") as directory:
        outcome = run(Settings(quick="--quick" in sys.argv, budget_s=20.0, workdir=directory))
    for row in outcome.rows:
        print(f"{row.name}: {row.value * 1000:.1f} ms, {row.ratio:.2f}x python -c pass")
    print(*outcome.notes, sep="\n")

"""``python -m benchmarks.suites``: real test suites run bare and under ``tracer run``, compared.

The compatibility corpus (issue 32, docs/compatibility.md): pure-Python packages, each pinned and
installed from its sdist, whose own test suite runs three times on one interpreter:

- *bare*: ``python -m pytest ARGS``;
- *C*: ``python -m tracer run --include 'PKG.*' -m pytest ARGS`` (the C accelerator);
- *pure*: the same with ``INVOSEQ_PURE=1`` (the pure-Python hot path).

Each run writes a JUnit XML file; the outcome of every test id (passed, failed, error, skipped,
xfailed) under C and under pure must be the bare run's. A traced run also reports how many
events its embedded repository stored (``cmr stats``), so a run that traced nothing shows.

This module downloads, installs and runs the suites, and is the command line; the suites
themselves are listed in ``benchmarks.suite_list``, and ``benchmarks.suite_outcomes`` parses,
compares and reports their runs' outcomes.

Everything lives outside the repository, under ``--cache`` (default ``~/.cache/invoseq-corpus``):
``sdists/`` (downloaded once with ``pip download --no-binary :all: --no-deps``), ``venvs/`` (one
virtualenv per interpreter: this repository installed non-editable, the test requirements
pinned, every sdist built and installed; ``--fresh`` makes it anew) and ``runs/`` (each suite's
unpacked sdist and its runs' XML, repositories and output, kept for a look after a difference).

Why here and not under tests/: the corpus downloads from PyPI and takes minutes; the project's
suite must run offline in CI's budget. ``.ci/corpus.sh`` runs it on 3.11 and 3.13.

Exit status: 0 when every suite's traced outcomes equal its bare ones, 1 when one differs (or a
run failed to produce results), 2 on a wrong command line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from benchmarks.suite_list import MODES, SUITES, TEST_REQUIREMENTS, Suite
from benchmarks.suite_outcomes import (
    Run,
    as_json,
    describe_counts,
    details,
    failed,
    first_line,
    parse_junit,
    table,
)

ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_CACHE: Final = Path.home() / ".cache" / "invoseq-corpus"


# -- running ------------------------------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def clean_environment(**settings: str) -> dict[str, str]:
    """This environment without any tracer setting nor virtualenv of the caller's, plus
    ``settings``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("INVOSEQ_") and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env.update(settings)
    return env


def log(message: str) -> None:
    print(f"suites: {message}", file=sys.stderr, flush=True)


def sh(command: Sequence[str | Path], **kwargs: Any) -> None:
    """Run a setup command; its output is shown only when it fails."""
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False, **kwargs
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise RuntimeError(
            f"{' '.join(map(str, command[:5]))} ... exited {done.returncode}:\n{tail}"
        )


def find_sdist(directory: Path, suite: Suite) -> Path | None:
    for stem in suite.sdist_stems:
        for suffix in (".tar.gz", ".zip"):
            path = directory / (stem + suffix)
            if path.exists():
                return path
    return None


def download(suites: Iterable[Suite], cache: Path) -> dict[str, Path]:
    """Each suite's sdist, downloaded into ``cache/sdists`` unless it is there already."""
    directory = cache / "sdists"
    directory.mkdir(parents=True, exist_ok=True)
    found = {}
    for suite in suites:
        path = find_sdist(directory, suite)
        if path is None:
            log(f"downloading the sdist of {suite.name}=={suite.version}")
            requirement = f"{suite.name}=={suite.version}"
            pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:"]
            sh([*pip, "--no-deps", "--dest", directory, requirement])
            path = find_sdist(directory, suite)
            if path is None:
                raise RuntimeError(f"pip downloaded no sdist named {suite.sdist_stems[0]}.*")
        found[suite.name] = path
    return found


def build_wheels(
    pip: Sequence[str | Path], directory: Path, sdists: Mapping[str, Path], version: str
) -> list[Path]:
    """A wheel built from each sdist, once: a pure-Python one (``*-none-any``) serves every
    interpreter, one with a C extension (wrapt's) the ``X.Y`` it was built for."""
    directory.mkdir(parents=True, exist_ok=True)
    abi = "-cp" + version.replace(".", "") + "-"

    def built(sdist: Path) -> Path | None:
        stem = sdist.name.removesuffix(".tar.gz").removesuffix(".zip").lower()
        stem = stem.replace("-", "_", stem.count("-") - 1) + "-"  # name_part-version-
        for wheel in directory.glob("*.whl"):
            name = wheel.name.lower()
            if name.startswith(stem) and (name.endswith("-none-any.whl") or abi in name):
                return wheel
        return None

    missing = [sdist for sdist in sdists.values() if built(sdist) is None]
    if missing:
        log(f"building {len(missing)} wheels from their sdists into {directory}")
        sh([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", directory, *missing])
    wheels = [built(sdist) for sdist in sdists.values()]
    if None in wheels:
        raise RuntimeError(f"pip wheel left no wheel in {directory} for one of {list(sdists)}")
    return [wheel for wheel in wheels if wheel is not None]


def prepare_venv(python: str, cache: Path, sdists: Mapping[str, Path], *, fresh: bool) -> Path:
    """The interpreter's corpus virtualenv: this repository (non-editable, rebuilt every time, so
    the tracer tested is the work tree's), the test requirements and every sdist."""
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    venv = cache / "venvs" / f"py{version}"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    existed = venv_python(venv).exists()
    if not existed:
        log(f"creating {venv}")
        sh([python, "-m", "venv", venv])
    started = time.monotonic()
    pip: list[str | Path] = [venv_python(venv), "-m", "pip", "--disable-pip-version-check"]
    wheels = build_wheels(pip, cache / "wheels", sdists, version)
    log(f"installing invoseq from {ROOT} and the {len(wheels)} packages into {venv}")
    install = [*pip, "install", "--quiet"]
    if existed:  # the work tree's tracer, rebuilt whatever pip thinks of the version installed
        sh([*install, *TEST_REQUIREMENTS, *wheels], env=clean_environment())
        sh([*install, "--force-reinstall", "--no-deps", ROOT], env=clean_environment())
    else:
        sh([*install, ROOT, *TEST_REQUIREMENTS, *wheels], env=clean_environment())
    # run outside the work tree: from it, ``import tracer`` would find the sources, not the install
    check = "import tracer._core.accel as a; assert a.IMPLEMENTATION == 'c'"
    sh([venv_python(venv), "-c", check], cwd=venv)
    log(f"installed in {time.monotonic() - started:.0f} s")
    return venv


def unpack(sdist: Path, into: Path) -> Path:
    """A fresh copy of the sdist's tree (tests may write into it)."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    (top,) = into.iterdir()
    return top


def command(suite: Suite, mode: str, python: Path, rundir: Path) -> list[str]:
    pytest = [
        "-m",
        "pytest",
        *suite.args,
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={rundir / f'{mode}.xml'}",
        f"--basetemp={rundir / f'{mode}-tmp'}",
        "-o",
        "junit_family=xunit1",
    ]
    for test in suite.deselect:
        pytest += ["--deselect", test]
    if mode == "bare":
        return [str(python), *pytest]
    return [
        *(str(python), "-m", "tracer", "run", "--include", f"{suite.package}.*"),
        *("--db", str(rundir / f"{mode}.sqlite"), "--no-report", *pytest),
    ]


def stored_events(python: Path, db: Path) -> int | None:
    done = subprocess.run(
        [str(python), "-m", "cmr", "stats", "--json", "--db", str(db)],
        capture_output=True,
        text=True,
        check=False,
        env=clean_environment(),
    )
    if done.returncode != 0:
        return None
    events: int = json.loads(done.stdout)["events"]
    return events


def run_once(
    suite: Suite, mode: str, *, python: Path, source: Path, rundir: Path, timeout_s: float
) -> Run:
    env = clean_environment(**suite.env, **({"INVOSEQ_PURE": "1"} if mode == "pure" else {}))
    xml = rundir / f"{mode}.xml"
    xml.unlink(missing_ok=True)
    started = time.monotonic()
    with open(rundir / f"{mode}.out", "w") as out:
        try:
            done = subprocess.run(
                command(suite, mode, python, rundir),
                cwd=source,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
            returncode = done.returncode
        except subprocess.TimeoutExpired:
            returncode = -1
    seconds = time.monotonic() - started
    run = Run(mode, {}, seconds, returncode)
    if returncode == -1:
        run.problem = f"timed out after {timeout_s:.0f} s"
    elif not xml.exists():
        tail = first_line("\n".join(reversed((rundir / f"{mode}.out").read_text().splitlines())))
        run.problem = f"exit {returncode}, no report: {tail}"
    else:
        run.outcomes = parse_junit(xml.read_text())
        if returncode not in (0, 1):  # 1: tests failed; anything else: pytest itself did
            run.problem = f"pytest exited {returncode}"
    if mode != "bare" and (rundir / f"{mode}.sqlite").exists():
        run.events = stored_events(python, rundir / f"{mode}.sqlite")
    return run


def run_suite(
    suite: Suite, sdist: Path, *, python: Path, cache: Path, tag: str, timeout_s: float
) -> dict[str, Run]:
    rundir = cache / "runs" / tag / suite.name
    if rundir.exists():  # a repository left by the last run would add its events to this one's
        shutil.rmtree(rundir)
    source = unpack(sdist, rundir / "src")
    runs = {}
    for mode in MODES:
        runs[mode] = run_once(
            suite, mode, python=python, source=source, rundir=rundir, timeout_s=timeout_s
        )
        events = "" if runs[mode].events is None else f", {runs[mode].events} events"
        log(
            f"{suite.name} {mode}: {describe_counts(runs[mode].outcomes)}"
            f" in {runs[mode].seconds:.1f} s{events}"
            + (f" ({runs[mode].problem})" if runs[mode].problem else "")
        )
    return runs


# -- command line -------------------------------------------------------------------------------


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.suites",
        description="Run the compatibility corpus: each suite bare, traced with the C "
        "accelerator and in pure Python; the test outcomes must be identical.",
        epilog="suites: " + ", ".join(f"{s.name}=={s.version}" for s in SUITES),
    )
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter to test on (default: this one)"
    )
    parser.add_argument(
        "--only", nargs="+", metavar="PKG", default=None, help="run only these packages"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="suites run at once (each runs its 3 runs in turn)"
    )
    parser.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help=f"sdists, venvs, runs ({DEFAULT_CACHE})"
    )
    parser.add_argument("--fresh", action="store_true", help="make the virtualenv anew")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds one run may take (default 600)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    names = {suite.name: suite for suite in SUITES}
    unknown = sorted(set(args.only or ()) - names.keys())
    if unknown:
        log(f"unknown package {', '.join(unknown)} (choose from {', '.join(names)})")
        return 2
    suites = [names[name] for name in args.only] if args.only else list(SUITES)
    started = time.monotonic()
    cache = args.cache.expanduser().resolve()
    sdists = download(SUITES, cache)  # all of them: the venv holds the whole corpus
    venv = prepare_venv(args.python, cache, sdists, fresh=args.fresh)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {
            suite: pool.submit(
                run_suite,
                suite,
                sdists[suite.name],
                python=venv_python(venv),
                cache=cache,
                tag=venv.name,
                timeout_s=args.timeout,
            )
            for suite in suites
        }
        results = {suite: future.result() for suite, future in futures.items()}
    version = subprocess.run(
        [str(venv_python(venv)), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"{version}, {time.monotonic() - started:.0f} s in all\n")
    print(table(results))
    differing = details(results)
    if differing:
        print("\n" + differing)
    if args.json:
        args.json.write_text(json.dumps(as_json(results, version), indent=1) + "\n")
    return 1 if failed(results) else 0


if __name__ == "__main__":
    sys.exit(main())

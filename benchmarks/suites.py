"""``python -m benchmarks.suites``: real test suites run bare and under ``tracer run``, compared.

The compatibility corpus (issue 32, docs/compatibility.md): pure-Python packages, each pinned and
installed from its sdist, whose own test suite runs three times on one interpreter:

- *bare*: ``python -m pytest ARGS``;
- *C*: ``python -m tracer run --include 'PKG.*' -m pytest ARGS`` (the C accelerator);
- *pure*: the same with ``INVOSEQ_PURE=1`` (the pure-Python hot path).

Each run writes a JUnit XML file; the outcome of every test id (passed, failed, error, skipped,
xfailed) under C and under pure must be the bare run's. A traced run also reports how many
events its embedded repository stored (``cmr stats``), so a run that traced nothing shows.

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
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_CACHE: Final = Path.home() / ".cache" / "invoseq-corpus"
MODES: Final = ("bare", "C", "pure")

#: What the suites need beyond their own package, pinned so that a result can be reproduced.
TEST_REQUIREMENTS: Final = (
    "pytest==9.2.0",
    "hypothesis==6.170.17",
    "freezegun==1.5.5",  # itsdangerous
    "pytest-asyncio==1.5.0",  # blinker
)


@dataclass(frozen=True, slots=True, eq=False)
class Suite:
    """One package of the corpus: its sdist, what to trace and how to run its tests."""

    name: str  # the distribution, as on PyPI
    version: str
    package: str  # the import package traced: --include 'PACKAGE.*'
    args: tuple[str, ...]  # pytest's arguments, run in the unpacked sdist
    checks: str  # what of Python's object model the suite leans on
    #: Test ids left out (pytest --deselect), each with its reason: failing or flaky bare, or
    #: too slow for the corpus's time budget.
    deselect: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def sdist_stems(self) -> tuple[str, ...]:
        """The file names an sdist of this release may have (PEP 625 normalises to '_')."""
        normal = self.name.lower().replace("-", "_")
        return (f"{normal}-{self.version}", f"{self.name}-{self.version}")


SLOW: Final = "slow bare"
NO_ASYNCIO: Final = ("-p", "no:asyncio")  # pytest-asyncio is for blinker; it warns elsewhere

SUITES: Final = (
    Suite(
        "pluggy",
        "1.7.0",
        "pluggy",
        ("testing", "--ignore=testing/benchmark.py", *NO_ASYNCIO),
        "introspection: hookspecs and hookimpls found with inspect; warnings' stacklevel",
        # pytest itself runs on pluggy: traced, every pytest hook call goes through it
    ),
    Suite(
        "attrs",
        "26.1.0",
        "attr",
        ("tests", *NO_ASYNCIO),
        "classes made by a factory (make_class: __module__ from the caller's frame), pickling",
        deselect={
            "tests/test_funcs.py": "slow bare: hypothesis (30 s of the suite's 45)",
            "tests/test_converters.py::TestPipe::test_wrapped_annotation": "fails bare on 3.11",
        },
    ),
    Suite(
        "more-itertools",
        "11.2.1",
        "more_itertools",
        ("tests", *NO_ASYNCIO),
        "generators, itertools recipes, threads (concurrent tee)",
        deselect={
            "tests/test_recipes.py::PrimeFunctionTests::test_primes": "slow bare (50 s)",
            "tests/test_recipes.py::PrimeFunctionTests::test_nth_prime_approximate": "slow bare",
            "tests/test_more.py::DiscreteFourierTransformTests::test_roundtrip": "slow bare",
            "tests/test_more.py::TestConcurrentTee::test_concurrent_consumers": "slow bare",
            "tests/test_more.py::ExtractTests::test_all_orderings": "slow bare",
            "tests/test_more.py::TestSerialize::test_concurrent_calls": "slow bare",
            "tests/test_recipes.py::PolynomialFromRootsTests::test_large": "slow bare",
            "tests/test_recipes.py::RunningMedianTests::test_vs_statistics_median": "slow bare",
            "tests/test_more.py::TestRandomOrderedRange::test_lcg_mitigation": "slow bare",
            "tests/test_recipes.py::PrimeFunctionTests::test_nth_prime_tightened_bound": SLOW,
        },
    ),
    Suite(
        "toolz",
        "1.2.0",
        "toolz",
        ("toolz", *NO_ASYNCIO),
        "introspection (curry reads signatures), pickling curried functions by reference",
    ),
    Suite(
        "cachetools",
        "8.0.2",
        "cachetools",
        ("tests", *NO_ASYNCIO),
        "decorators wrapping functions and methods, cache keys, locks",
    ),
    Suite(
        "blinker",
        "1.9.0",
        "blinker",
        ("tests", "-o", "asyncio_default_fixture_loop_scope=function"),
        "identity and weak references to receivers, gc",
    ),
    Suite(
        "decorator",
        "5.3.1",
        "decorator",
        ("tests/test.py", *NO_ASYNCIO),
        "introspection: signatures, __wrapped__, generated functions",
    ),
    Suite(
        "six",
        "1.17.0",
        "six",
        ("test_six.py", *NO_ASYNCIO),
        "module magic: lazy attributes, meta path importer, metaclasses",
    ),
    Suite(
        "itsdangerous",
        "2.2.0",
        "itsdangerous",
        ("tests", *NO_ASYNCIO),
        "class hierarchies, time frozen by freezegun",
    ),
    Suite(
        "boltons",
        "26.2.0",
        "boltons",
        ("tests", *NO_ASYNCIO),
        "frames and tracebacks (tbutils), function introspection and rewriting (funcutils)",
    ),
    Suite(
        "wrapt",
        "2.5.2",
        "wrapt",
        ("tests", *NO_ASYNCIO),
        "proxies and descriptors, identity of wrapped functions (pure-Python mode)",
        env={"WRAPT_DISABLE_EXTENSIONS": "true"},
    ),
    Suite(
        "trio",
        "0.35.0",
        "trio",
        (
            "--pyargs",
            "trio._tests.test_signals",
            "trio._core._tests.test_ki",
            "trio._core._tests.test_run",
            *NO_ASYNCIO,
        ),
        "signals: the wakeup fd, KeyboardInterrupt delivery, frames of coroutines",
    ),
)


# -- results ------------------------------------------------------------------------------------

#: Outcomes, worst first: a test reported twice (a failure in the call, an error in teardown)
#: keeps the worse.
OUTCOMES: Final = ("error", "failed", "passed", "xfailed", "skipped")


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: str  # one of OUTCOMES
    message: str = ""  # the first line of the failure, error or skip


@dataclass(slots=True)
class Run:
    """One run of one suite: every test id's outcome, or why there are none."""

    mode: str
    outcomes: dict[str, Outcome]
    seconds: float
    returncode: int
    events: int | None = None  # stored by the embedded repository (traced runs)
    problem: str = ""  # the run produced no results: why


@dataclass(frozen=True, slots=True)
class Difference:
    test: str
    bare: Outcome | None  # None: the test was not there
    traced: Outcome | None


def first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


def parse_junit(xml: str) -> dict[str, Outcome]:
    """Test id (``classname::name``) to outcome, from pytest's JUnit XML."""
    outcomes: dict[str, Outcome] = {}
    for case in ET.fromstring(xml).iter("testcase"):
        # --pyargs with --import-mode=importlib (trio) leaves classname empty: the file then
        # (xunit1's attribute, asked for on the command line) tells the modules apart
        where = case.get("classname") or case.get("file", "")
        test = f"{where}::{case.get('name', '')}"
        found = Outcome("passed")
        for child in case:
            if child.tag in ("failure", "error"):
                kind = "failed" if child.tag == "failure" else "error"
                found = Outcome(kind, first_line(child.get("message")) or first_line(child.text))
            elif child.tag == "skipped":
                kind = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                found = Outcome(kind, first_line(child.get("message")))
            else:
                continue
            break
        previous = outcomes.get(test)
        if previous is None or OUTCOMES.index(found.outcome) < OUTCOMES.index(previous.outcome):
            outcomes[test] = found
    return outcomes


def compare(bare: Mapping[str, Outcome], traced: Mapping[str, Outcome]) -> list[Difference]:
    """The tests whose outcome differs (or that one side lacks), in id order. Messages alone
    never count: a failure's text may name an address or a temporary path."""
    differences = []
    for test in sorted(bare.keys() | traced.keys()):
        one, other = bare.get(test), traced.get(test)
        if one is None or other is None or one.outcome != other.outcome:
            differences.append(Difference(test, one, other))
    return differences


def counts(outcomes: Mapping[str, Outcome]) -> dict[str, int]:
    found = dict.fromkeys(OUTCOMES, 0)
    for outcome in outcomes.values():
        found[outcome.outcome] += 1
    return found


def describe_counts(outcomes: Mapping[str, Outcome]) -> str:
    found = counts(outcomes)
    failed = found["failed"] + found["error"]
    skipped = found["skipped"] + found["xfailed"]
    return f"{found['passed']} passed, {failed} failed" + (
        f", {skipped} skipped" if skipped else ""
    )


#: Differences known and explained (docs/compatibility.md), by (package, mode, test id): they
#: are reported, and do not fail the run. Each is an open problem, not an exception granted.
KNOWN: Final[dict[tuple[str, str, str], str]] = {
    (
        "more-itertools",
        "pure",
        "tests.test_more.SeekableTest::test_repeated_zero_cache_peek_has_bounded_memory",
    ): "tracemalloc counts the pure-Python path's events: tuples the program's thread builds and "
    "keeps until the sender drains them; hiding them would cost a call per event (the C "
    "accelerator's buffers and batches it does not see)",
}


def unexplained(suite: str, mode: str, differences: list[Difference]) -> list[Difference]:
    return [d for d in differences if (suite, mode, d.test) not in KNOWN]


def verdict(bare: Run, traced: Run, suite: str) -> str:
    if traced.problem:
        return f"no results ({traced.problem})"
    differences = compare(bare.outcomes, traced.outcomes)
    known = len(differences) - len(unexplained(suite, traced.mode, differences))
    if not differences:
        return "identical"
    if known == len(differences):
        return f"{known} known difference" + ("s" if known > 1 else "")
    return f"{len(differences)} differ" + (f" ({known} known)" if known else "")


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


# -- reporting ----------------------------------------------------------------------------------


def table(results: Mapping[Suite, Mapping[str, Run]]) -> str:
    """The Markdown table docs/compatibility.md keeps."""
    lines = [
        "| package | version | tests | bare | C | pure | events stored (C / pure) "
        "| seconds (bare / C / pure) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for suite, runs in results.items():
        bare = runs["bare"]
        events = " / ".join(f"{runs[m].events:,}" if runs[m].events else "—" for m in MODES[1:])
        seconds = " / ".join(f"{runs[m].seconds:.0f}" for m in MODES)
        lines.append(
            f"| {suite.name} | {suite.version} | {len(bare.outcomes)} | "
            f"{describe_counts(bare.outcomes)} | {verdict(bare, runs['C'], suite.name)} | "
            f"{verdict(bare, runs['pure'], suite.name)} | {events} | {seconds} |"
        )
    return "\n".join(lines)


#: Differing tests shown per suite and run; the rest are counted (--json keeps them all).
SHOWN: Final = 20


def details(results: Mapping[Suite, Mapping[str, Run]]) -> str:
    """The differing tests: outcome bare and traced, and the first line of the failure."""
    lines = []
    for suite, runs in results.items():
        for mode in MODES[1:]:
            differences = compare(runs["bare"].outcomes, runs[mode].outcomes)
            if runs[mode].problem:
                lines.append(f"{suite.name} {mode}: {runs[mode].problem}")
            if len(differences) > SHOWN:
                lines.append(f"{suite.name} {mode}: {len(differences)} differ, the first {SHOWN}:")
            for difference in differences[:SHOWN]:
                one = difference.bare.outcome if difference.bare else "absent"
                other = difference.traced.outcome if difference.traced else "absent"
                message = difference.traced.message if difference.traced else ""
                lines.append(f"{suite.name} {mode}: {difference.test}: {one} -> {other}: {message}")
    return "\n".join(lines)


def as_json(results: Mapping[Suite, Mapping[str, Run]], python: str) -> dict[str, Any]:
    return {
        "python": python,
        "suites": {
            suite.name: {
                "version": suite.version,
                "runs": {
                    mode: {
                        "seconds": round(run.seconds, 1),
                        "returncode": run.returncode,
                        "events": run.events,
                        "problem": run.problem,
                        "counts": counts(run.outcomes),
                        "differences": [
                            {
                                "test": d.test,
                                "bare": d.bare.outcome if d.bare else None,
                                "traced": d.traced.outcome if d.traced else None,
                                "message": d.traced.message if d.traced else "",
                            }
                            for d in compare(runs["bare"].outcomes, run.outcomes)
                        ],
                    }
                    for mode, run in runs.items()
                },
            }
            for suite, runs in results.items()
        },
    }


def failed(results: Mapping[Suite, Mapping[str, Run]]) -> bool:
    """Whether a run gave no results, or an outcome differs from the bare one unexplained."""
    return any(
        run.problem
        or unexplained(suite.name, run.mode, compare(runs["bare"].outcomes, run.outcomes))
        for suite, runs in results.items()
        for run in runs.values()
    )


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

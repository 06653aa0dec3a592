"""The compatibility corpus's outcomes: the runs' JUnit XML parsed, compared and reported.

A run's JUnit XML becomes each test id's ``Outcome``; a traced run's outcomes are compared with
the bare run's by kind alone (a message may name an address or a temporary path), and a
difference is either unexplained or listed, with its reason, in ``KNOWN``. The reporting half
turns a whole run of the corpus into the Markdown table docs/compatibility.md keeps, the
differing tests, the JSON ``--json`` writes, and whether the corpus failed (``failed``: the exit
status). Nothing here runs a process: ``benchmarks.suites`` runs the suites and hands their
``Run``s here.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from benchmarks.suite_list import MODES, Suite

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

"""The compatibility corpus's runner (benchmarks/suites.py, suite_list.py, suite_outcomes.py): its
parsing and comparing, offline.

The corpus itself downloads from PyPI and takes minutes: ``.ci/corpus.sh`` runs it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import suite_list, suite_outcomes, suites
from benchmarks.suite_list import Suite
from benchmarks.suite_outcomes import Outcome, Run, compare, parse_junit

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="2" tests="6">
<testcase classname="tests.test_a" name="test_passes" time="0.001" />
<testcase classname="tests.test_a" name="test_fails[1]" time="0.001">
  <failure message="AssertionError: assert '_caller.py' == 'test_warnings.py'&#10;more">
  traceback</failure></testcase>
<testcase classname="tests.test_a.TestX" name="test_skipped" time="0.0">
  <skipped type="pytest.skip" message="no trio here">reason</skipped></testcase>
<testcase classname="tests.test_a.TestX" name="test_xfails" time="0.0">
  <skipped type="pytest.xfail" message="known" /></testcase>
<testcase classname="tests.test_b" name="test_teardown" time="0.0" />
<testcase classname="tests.test_b" name="test_teardown" time="0.0">
  <error message="failed on teardown with &quot;OSError&quot;">...</error></testcase>
<testcase classname="" file="src/pkg/_tests/test_c.py" name="test_pyargs" time="0.0" />
</testsuite></testsuites>
"""


def test_junit_xml_gives_every_test_id_its_outcome_and_first_line() -> None:
    assert parse_junit(JUNIT) == {
        "tests.test_a::test_passes": Outcome("passed"),
        "tests.test_a::test_fails[1]": Outcome(
            "failed", "AssertionError: assert '_caller.py' == 'test_warnings.py'"
        ),
        "tests.test_a.TestX::test_skipped": Outcome("skipped", "no trio here"),
        "tests.test_a.TestX::test_xfails": Outcome("xfailed", "known"),
        # reported twice (call passed, teardown errored): the worse outcome stays
        "tests.test_b::test_teardown": Outcome("error", 'failed on teardown with "OSError"'),
        "src/pkg/_tests/test_c.py::test_pyargs": Outcome("passed"),
    }


def test_outcomes_are_compared_by_kind_and_missing_tests_count() -> None:
    bare = {"a": Outcome("passed"), "b": Outcome("failed", "at 0x7f01"), "c": Outcome("passed")}
    traced = {"a": Outcome("passed"), "b": Outcome("failed", "at 0x7f99"), "d": Outcome("passed")}
    differences = compare(bare, traced)
    assert [(d.test, d.bare, d.traced) for d in differences] == [
        ("c", Outcome("passed"), None),
        ("d", None, Outcome("passed")),
    ]
    assert compare(bare, dict(bare)) == []


def test_the_table_and_the_details_name_each_difference() -> None:
    suite = Suite("pkg", "1.0", "pkg", ("tests",), "identity")
    bare = parse_junit(JUNIT)
    traced = dict(bare, **{"tests.test_a::test_passes": Outcome("failed", "assert f is g")})
    results = {
        suite: {
            "bare": Run("bare", bare, 1.0, 1),
            "C": Run("C", dict(bare), 2.0, 1, events=1234),
            "pure": Run("pure", traced, 3.0, 1, events=1250),
        }
    }
    row = suite_outcomes.table(results).splitlines()[2]
    assert row == (
        "| pkg | 1.0 | 6 | 2 passed, 2 failed, 2 skipped | identical | 1 differ "
        "| 1,234 / 1,250 | 1 / 2 / 3 |"
    )
    assert suite_outcomes.details(results) == (
        "pkg pure: tests.test_a::test_passes: passed -> failed: assert f is g"
    )
    assert suite_outcomes.failed(results)
    results[suite]["pure"] = Run("pure", {}, 3.0, 2, problem="exit 2, no report")
    assert "no results (exit 2, no report)" in suite_outcomes.table(results)


def test_a_traced_run_includes_the_package_and_deselects_the_excluded(tmp_path: Path) -> None:
    suite = Suite("more-itertools", "1.0", "more_itertools", ("tests",), "", {"t::x": "slow"})
    python = Path("/venv/bin/python")
    bare = suites.command(suite, "bare", python, tmp_path)
    traced = suites.command(suite, "pure", python, tmp_path)
    assert bare[:4] == ["/venv/bin/python", "-m", "pytest", "tests"]
    assert bare[-2:] == ["--deselect", "t::x"]
    assert traced[:6] == [
        "/venv/bin/python",
        "-m",
        "tracer",
        "run",
        "--include",
        "more_itertools.*",
    ]
    pytest = traced[traced.index("-m", 2) :]
    assert [arg.replace("pure", "bare") for arg in pytest] == bare[1:]
    assert f"--junitxml={tmp_path / 'pure.xml'}" in traced
    assert suite.sdist_stems == ("more_itertools-1.0", "more-itertools-1.0")


def test_the_corpus_is_pinned_and_every_exclusion_says_why() -> None:
    assert len(suite_list.SUITES) >= 10
    assert len({suite.name for suite in suite_list.SUITES}) == len(suite_list.SUITES)
    for suite in suite_list.SUITES:
        assert re.fullmatch(r"\d+(\.\d+)+", suite.version), suite.name
        assert suite.checks, suite.name
        assert all(reason.strip() for reason in suite.deselect.values()), suite.name
    assert all("==" in requirement for requirement in suite_list.TEST_REQUIREMENTS)


def test_a_known_difference_is_reported_and_does_not_fail_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    suite = Suite("pkg", "1.0", "pkg", ("tests",), "identity")
    bare = parse_junit(JUNIT)
    traced = dict(bare, **{"tests.test_a::test_passes": Outcome("failed", "counted")})
    results = {
        suite: {
            "bare": Run("bare", bare, 1.0, 1),
            "C": Run("C", dict(bare), 2.0, 1, events=1),
            "pure": Run("pure", traced, 3.0, 1, events=1),
        }
    }
    monkeypatch.setitem(suite_outcomes.KNOWN, ("pkg", "pure", "tests.test_a::test_passes"), "why")
    assert "| identical | 1 known difference |" in suite_outcomes.table(results)
    assert not suite_outcomes.failed(results)
    results[suite]["C"] = Run("C", traced, 2.0, 1, events=1)  # the same test, not known in C
    assert "| 1 differ | 1 known difference |" in suite_outcomes.table(results)
    assert suite_outcomes.failed(results)

"""tracer._core.inject (CPython 3.11): the hooks of the instrumented corpus functions
(``inject_corpus_*.py``) are called, scenario by scenario, in the sequence 3.12's sys.monitoring
reports for the same code (EXPECTED: what ``python3.12 tests/tracer/inject_corpus_scenarios.py``
printed; that script runs again when a Python 3.12 is found, ``INVOSEQ_PYTHON312``,
``python3.12`` on PATH or pyenv's 3.12.*), and every scenario's outcome is the bare run's:
results, exceptions, the traceback's frames and lines, ``sys._getframe(1)``, the warning's
attribution, the finally blocks that ran."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

if sys.version_info[:2] != (3, 11):
    pytest.skip(
        "code instrumentation is the 3.11 path (3.12+: sys.monitoring)", allow_module_level=True
    )

from tests.tracer import inject_corpus_scenarios as corpus
from tests.tracer.inject_support import EXPECTED, SCENARIOS, Recorder, instrument_corpus

CORPUS_FILE = corpus.__file__  # the script that Python 3.12 runs


@pytest.fixture(scope="module")
def bare_results() -> dict[str, Any]:
    return corpus.run_scenarios([])


@pytest.fixture(scope="module")
def instrumented_results() -> dict[str, Any]:
    hooks = Recorder()
    functions, originals = instrument_corpus(hooks)
    try:
        return corpus.run_scenarios(hooks.events)
    finally:
        for f, code in zip(functions, originals, strict=True):
            f.__code__ = code


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_events_are_those_of_python312(instrumented_results: dict[str, Any], scenario: str) -> None:
    assert instrumented_results[scenario]["events"] == EXPECTED[scenario]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_behaviour_is_unchanged(
    bare_results: dict[str, Any], instrumented_results: dict[str, Any], scenario: str
) -> None:
    """Results, exceptions, the traceback's frames and lines, ``sys._getframe(1)``, the
    warning's attribution, the finally blocks that ran."""
    assert instrumented_results[scenario]["outcome"] == bare_results[scenario]["outcome"]


def _python312() -> str | None:
    candidates = [os.environ.get("INVOSEQ_PYTHON312"), shutil.which("python3.12")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python")))
    for exe in candidates:
        if not exe:
            continue
        probe = subprocess.run(
            [exe, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return exe
    return None


def test_events_match_live_python312(instrumented_results: dict[str, Any]) -> None:
    exe = _python312()
    if exe is None:
        pytest.skip("no Python 3.12 here: EXPECTED (recorded on 3.12) stands in for it")
    recorded = subprocess.run(
        [exe, CORPUS_FILE], capture_output=True, text=True, check=True, timeout=60
    )
    live = json.loads(recorded.stdout)
    assert live == EXPECTED, "3.12 reports other events than EXPECTED holds: re-record it"
    ours = {name: result["events"] for name, result in instrumented_results.items()}
    assert ours == live

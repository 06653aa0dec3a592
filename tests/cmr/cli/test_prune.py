"""`cmr prune --older-than AGE`: what it removes, what it prints, and how it fails."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cmr.cli.common import parse_age
from cmr.store import open_store
from invoseq import wire
from tests.cmr.cli_helpers import one_line_error, run
from tests.cmr.conftest import BatchFactory

OLD = bytes.fromhex("01d".ljust(32, "0"))
NEW = bytes.fromhex("0e1".ljust(32, "0"))
HOUR_NS = 3600 * 10**9


@pytest.fixture(name="repo")
def fixture_repo(tmp_path: Path, make_batch: BatchFactory) -> str:
    """A repository with a sequence started three hours ago and one started just now."""
    path = str(tmp_path / "cmr.sqlite")
    now = time.time_ns()
    store = open_store(path)
    try:
        for puid, seq, ago in ((1, OLD, 3 * HOUR_NS), (2, NEW, 0)):
            events = [wire.Start(1, 0, 0, 1, 0, seq), wire.End(1, 1_000)]
            batch = make_batch(puid, 1, {1: events}, clock_offset_ns=now - ago)
            store.ingest(batch, now - ago)
    finally:
        store.close()
    return path


def test_prune_removes_what_is_older_and_says_so(
    repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--db", repo, "prune", "--older-than", "2h")

    assert code == 0
    assert out.startswith("removed 1 sequence, 0 samples and 1 process from before ")
    code, out, _ = run(capsys, "ls", "--json", "--db", repo)
    assert [entry["seq"] for entry in json.loads(out)] == [NEW.hex()]


def test_prune_json_counts_what_went(repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.time_ns()
    code, out, _ = run(capsys, "prune", "--older-than", "1m", "--json", "--db", repo)

    assert code == 0
    printed = json.loads(out)
    assert {k: printed[k] for k in ("sequences", "samples", "processes")} == {
        "sequences": 1,
        "samples": 0,
        "processes": 1,
    }
    assert started - 60 * 10**9 <= printed["before_ns"] <= time.time_ns() - 60 * 10**9


def test_nothing_old_enough_removes_nothing(repo: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "prune", "--older-than", "7d", "--db", repo)

    assert code == 0
    assert out.startswith("removed 0 sequences, 0 samples and 0 processes")


def test_prune_never_creates_a_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "typo.sqlite"

    code, _, err = run(capsys, "prune", "--older-than", "7d", "--db", str(path))

    assert code == 1
    assert one_line_error(err).startswith("cmr: no repository at ")
    assert not path.exists()


@pytest.mark.parametrize("age", ["7", "7y", "1.5", "d", "1d2h", ""])
def test_a_bad_age_is_a_one_line_usage_error(
    repo: str, capsys: pytest.CaptureFixture[str], age: str
) -> None:
    code, _, err = run(capsys, "prune", "--older-than", age, "--db", repo)

    assert code == 2
    assert "expected an age: a number and a unit s, m, h, d or w" in one_line_error(err)


@pytest.mark.parametrize(
    ("age", "seconds"),
    [
        ("30s", 30),
        ("15m", 900),
        ("12h", 43_200),
        ("7d", 604_800),
        ("2w", 1_209_600),
        ("1.5h", 5400),
    ],
)
def test_ages_take_the_cli_s_one_grammar_weeks_and_fractions_included(
    age: str, seconds: int
) -> None:
    assert parse_age(age) == seconds * 10**9

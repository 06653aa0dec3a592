"""`cmr top` on a repository whose sequences the test wrote: rows per root and per method, as
a table and as JSON."""

from __future__ import annotations

import json

import pytest

from cmr.store import open_store
from invoseq import wire
from tests.cmr.cli_helpers import run
from tests.cmr.store.records import seq_id, start

MS = 1_000_000


@pytest.fixture(name="repo")
def fixture_repo(tmp_path, make_batch) -> str:
    """Ten shop.checkout sequences taking 10, 20 .. 100 ms, each calling shop.fetch for half of
    it; the last one raises."""
    events: list[wire.Event] = []
    for n in range(10):
        t, took = n * 1_000 * MS, (n + 1) * 10 * MS
        events += [
            start(2 * n + 1, t, seq_id(f"c{n:02d}")),
            start(2 * n + 2, t, seq_id(f"c{n:02d}"), parent=2 * n + 1, method=2),
        ]
        events += [wire.End(2 * n + 2, t + took // 2)]
        events += [
            wire.Error(2 * n + 1, t + took, "TimeoutError")
            if n == 9
            else wire.End(2 * n + 1, t + took)
        ]
    path = str(tmp_path / "cmr.sqlite")
    store = open_store(path)
    try:
        methods = {1: "shop.checkout", 2: "shop.fetch"}
        store.ingest(make_batch(7, 1, {1: events}, methods=methods), 0)
    finally:
        store.close()
    return path


def test_top_by_root_as_json_and_as_a_table(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "top", "--json")
    assert code == 0
    assert json.loads(out) == [
        {
            "name": "shop.checkout",
            "count": 10,
            "errors": 1,
            "p50_ns": 50 * MS,
            "p90_ns": 90 * MS,
            "p99_ns": 100 * MS,
            "max_ns": 100 * MS,
        }
    ]
    code, out, _ = run(capsys, "--db", repo, "top")
    assert out.splitlines() == [
        "NAME           COUNT  ERRORS      P50      P90     P99     MAX",
        "shop.checkout     10       1  50.0 ms  90.0 ms  100 ms  100 ms",
    ]


def test_top_by_method_adds_up_self_time(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "top", "--by", "method", "--json")

    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["shop.fetch"]["count"] == 10
    assert rows["shop.fetch"]["p50_ns"] == 25 * MS
    assert rows["shop.checkout"]["self_ns"] == sum((n + 1) * 5 * MS for n in range(10))
    assert rows["shop.checkout"]["errors"] == 1


def test_top_says_when_nothing_matches(repo, capsys):
    assert run(capsys, "--db", repo, "top", "--root", "nothing.*")[1] == "no sequence matches\n"
    assert run(capsys, "--db", repo, "top", "--since", "1h", "--json")[1] == "[]\n"

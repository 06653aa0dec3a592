"""`cmr diff` on two runs of one real program, one call of which was made slower."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import cmr, cmr_json, cmr_server, run_traced, write_script

pytestmark = pytest.mark.system

PROGRAM = """
import os, time
import tracer

@tracer.traced
def fetch(ms):
    time.sleep(ms / 1000)

@tracer.traced
def checkout():
    fetch(20)
    fetch(int(os.environ["SLOW_MS"]))
    fetch(20)

checkout()
"""


def test_two_runs_differ_where_one_call_was_made_slower(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "shop.py", PROGRAM)
    with cmr_server(db) as endpoint:
        run_traced(script, endpoint, SLOW_MS="20")
        run_traced(script, endpoint, SLOW_MS="300")
    newer, older = (line["seq"] for line in cmr_json(db, "ls"))

    rows = json.loads(cmr(db, "diff", older[:8], newer[:8], "--json").stdout)
    text = cmr(db, "diff", older[:8], newer[:8], "--limit", "2").stdout.splitlines()

    # The slowed call and its caller changed by about the same: they come first, in either order.
    by_path = {row["path"]: row for row in rows}
    assert {row["path"] for row in rows[:2]} == {
        "__main__.checkout",
        "__main__.checkout/__main__.fetch#2",
    }
    slowed = by_path["__main__.checkout/__main__.fetch#2"]
    assert slowed["delta_ns"] == slowed["b_ns"] - slowed["a_ns"]
    assert slowed["delta_ns"] > 200_000_000  # 280 ms slower, give or take the scheduler
    assert {row["path"] for row in rows} == {
        "__main__.checkout",
        "__main__.checkout/__main__.fetch",
        "__main__.checkout/__main__.fetch#2",
        "__main__.checkout/__main__.fetch#3",
    }
    assert text[0] == f"A {older}  " + text[0].split("  ", 1)[1]
    assert text[2].split() == ["PATH", "A", "B", "CHANGE"]
    assert {text[3].split()[0], text[4].split()[0]} == {row["path"] for row in rows[:2]}
    assert text[-1] == "… 2 more paths: --limit 0 prints them all"


def test_an_unknown_sequence_is_a_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "shop.py", PROGRAM)
    with cmr_server(db) as endpoint:
        run_traced(script, endpoint, SLOW_MS="1")
    [line] = cmr_json(db, "ls")

    result = cmr(db, "diff", line["seq"], "ffffffff", check=False)

    assert result.returncode == 1
    assert result.stderr.startswith("cmr: ")
    assert result.stderr.count("\n") == 1

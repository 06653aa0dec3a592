"""One status word for a sequence on every surface: a complete sequence whose root call raised
is ``error`` in ``cmr ls``, in ``cmr show``'s header (and ``--threads``), in the HTML report's
header, in ``cmr ui``'s listing and in the report ``tracer run`` prints at exit; JSON keeps the
state (``complete``) and the exception apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cmr.report import build_model
from cmr.store import open_store
from cmr.store.base import shown_status
from cmr.ui.listing import render_list_page
from cmr.ui.query import parse_filter
from invoseq import wire
from tests.cmr.cli_helpers import run
from tests.cmr.conftest import BatchFactory
from tracer.run.summary import ReportOptions, render_report

RAISED = bytes.fromhex("e1" * 16)
FINE = bytes.fromhex("0c" * 16)
MS = 1_000_000


@pytest.fixture(name="repo")
def fixture_repo(tmp_path: Path, make_batch: BatchFactory, clock_offset_ns: int) -> str:
    """``cli.main`` raised SystemExit; ``cli.ok`` returned."""
    events = [
        wire.Start(1, 0, 0, 1, 0, RAISED),
        wire.Error(1, 3 * MS, "SystemExit"),
        wire.Start(2, 0, 0, 2, 5 * MS, FINE),
        wire.End(2, 6 * MS),
    ]
    batch = make_batch(7, 0, {1: events}, methods={1: "cli.main", 2: "cli.ok"}, final=True)
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        assert store.ingest(batch, clock_offset_ns)
    finally:
        store.close()
    return path


def status_column(table: str) -> dict[str, str]:
    """ROOT -> STATUS of a sequence table."""
    lines = table.splitlines()
    at = lines[0].index("STATUS")  # a left-aligned column: its cells start under its name
    return {line.split()[-1]: line[at:].split()[0] for line in lines[1:]}


def test_ls_show_and_threads_say_error_for_a_root_that_raised(repo: str, capsys) -> None:
    code, out, _ = run(capsys, "ls", "--db", repo)
    assert code == 0
    assert status_column(out) == {"cli.main": "error", "cli.ok": "complete"}
    for argv in (["show"], ["show", "--threads"]):
        code, out, _ = run(capsys, *argv, RAISED.hex()[:12], "--db", repo)
        assert code == 0
        assert out.splitlines()[0].split()[:2] == [RAISED.hex(), "error"]
        code, out, _ = run(capsys, *argv, FINE.hex()[:12], "--db", repo)
        assert out.splitlines()[0].split()[:2] == [FINE.hex(), "complete"]


def test_json_keeps_the_state_and_the_exception_apart(repo: str, capsys) -> None:
    _, out, _ = run(capsys, "ls", "--json", "--db", repo)
    lines = {line["root"]: (line["status"], line["error"]) for line in json.loads(out)}
    assert lines == {"cli.main": ("complete", "SystemExit"), "cli.ok": ("complete", None)}


def test_the_html_report_and_the_ui_listing_say_error(repo: str) -> None:
    store = open_store(repo, readonly=True)
    try:
        model = build_model(store.load_sequence(RAISED))
        page = render_list_page(
            store.list_sequences(10), parse_filter({}), repository=repo, now_ns=0
        )
    finally:
        store.close()
    assert model["summary"]["status"] == "error"
    table = page.split("<table id='sequences'>")[1]  # the charts above name the sequence too
    raised_row = next(row for row in table.split("</tr>") if RAISED.hex() in row)
    assert f"<a class='dot s-error' href='/seq/{RAISED.hex()}'" in page  # a red mark
    assert "<span class='status-error'>error</span>" in raised_row


def test_the_report_tracer_run_prints_says_error(repo: str) -> None:
    text = render_report(ReportOptions(repo, started_ns=0, db_flag=None, patterns=("cli",)))
    assert status_column(text.split("\n\n")[1]) == {"cli.main": "error", "cli.ok": "complete"}
    tree_header = text.split("\n\n")[2].splitlines()[1]
    assert tree_header.split()[:2] == [RAISED.hex(), "error"]


@pytest.mark.parametrize(
    ("state", "error", "word"),
    [
        ("complete", "SystemExit", "error"),
        ("complete", None, "complete"),
        ("running", None, "running"),
        ("incomplete", None, "incomplete"),
        ("running", "ValueError", "running"),  # only a complete sequence is an error
    ],
)
def test_one_function_decides_the_word(state: str, error: str | None, word: str) -> None:
    assert shown_status(state, error) == word

"""The command line on a PostgreSQL URL: the read commands and prune take one, and a wrong
password is one line.
Runs against the server INVOSEQ_TEST_PG names (see conftest.py), each test in its own schema."""

from __future__ import annotations

import json

import psycopg
import pytest

from cmr.cli import main
from cmr.store import open_store
from invoseq import wire
from tests.cmr.store.records import BatchFactory, seq_id, start

pytestmark = pytest.mark.postgres


def test_read_commands_and_prune_take_a_postgresql_url(
    pg_url: str, make_batch: BatchFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    seq = seq_id("5e")
    store = open_store(pg_url)
    try:
        store.ingest(make_batch(7, 1, {1: [start(1, 100, seq), wire.End(1, 300)]}), 1)
    finally:
        store.close()

    assert main(["--db", pg_url, "ls", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["seq"] == seq.hex()
    assert main(["show", "5e", "--db", pg_url]) == 0
    assert "app.m1" in capsys.readouterr().out
    assert main(["stats", "--db", pg_url]) == 0
    assert main(["profile", "5e", "--db", pg_url]) == 0
    assert main(["export", "5e", "--format", "chrome", "--db", pg_url]) == 0
    capsys.readouterr()
    # The commands that query many sequences, or follow one's critical path, read it too.
    assert main(["ls", "--root", "app.*", "--status", "complete", "--json", "--db", pg_url]) == 0
    assert [line["seq"] for line in json.loads(capsys.readouterr().out)] == [seq.hex()]
    assert main(["top", "--json", "--db", pg_url]) == 0
    assert json.loads(capsys.readouterr().out)[0]["count"] == 1
    assert main(["show", "5e", "--critical-path", "--json", "--db", pg_url]) == 0
    assert [step["name"] for step in json.loads(capsys.readouterr().out)["path"]] == ["app.m1"]
    assert main(["diff", "5e", "5e", "--json", "--db", pg_url]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"path": "app.m1", "a_ns": 200, "b_ns": 200, "delta_ns": 0}
    ]

    # The sequence started at the test clock's epoch, long before now.
    assert main(["prune", "--older-than", "1d", "--json", "--db", pg_url]) == 0
    assert json.loads(capsys.readouterr().out)["sequences"] == 1
    assert main(["ls", "--db", pg_url]) == 0


def test_a_wrong_password_is_one_line_on_the_command_line(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    wrong = pg_url.replace(f":{info['password']}@", ":not-the-password@", 1)
    assert wrong != pg_url

    assert main(["ls", "--db", wrong]) == 1

    err = capsys.readouterr().err
    assert err.startswith("cmr: cannot connect to postgresql://")
    assert err.count("\n") == 1
    assert "not-the-password" not in err

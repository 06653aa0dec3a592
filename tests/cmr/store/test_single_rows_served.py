"""End to end: request-shaped traffic sent to a real ``cmr serve`` over ipc is stored as single
rows, and ``cmr ls`` (every sort and filter) and ``cmr show`` print of that repository what they
print of one the same batches were stored in with single rows off: SQLite files, or PostgreSQL
schemas."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.serve import serve_chunk
from cmr.store import open_store, single_rows
from tests.cmr.conftest import CLOCK_OFFSET_NS, encode_batch
from tests.cmr.store.records import single_row_count
from tests.cmr.store.request_traffic import RequestTraffic
from tests.requirements import postgres_database

LISTINGS = (
    (),
    ("--sort", "duration"),
    ("--root", "app.m2"),
    ("--root", "app.m*", "--sort", "duration", "--limit", "7"),
    ("--status", "error"),
    ("--status", "complete", "--host", "web-b"),
    ("--status", "running"),
    ("--min-duration", "0.00002", "--max-duration", "0.0004"),
    ("--host", "web-a", "--limit", "5"),
    ("--kind", "all", "--sort", "duration"),
)


def cmr(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cmr", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(
    name="repositories", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def fixture_repositories(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """Two fresh repositories of one backend: the served one, and the reference."""
    if request.param == "sqlite":
        yield [str(tmp_path / "served.sqlite"), str(tmp_path / "reference.sqlite")]
    else:
        with postgres_database() as served, postgres_database() as reference:
            yield [served, reference]


def test_cmr_serve_stores_requests_as_single_rows_that_cmr_ls_and_show_read_alike(
    tmp_path: Path, repositories: list[str]
) -> None:
    traffic = RequestTraffic(random.Random(6))
    batches = [batch for at in range(4) for batch in traffic.group(later=at > 0)]
    served, reference = repositories
    serve_chunk(tmp_path, served, 1, [encode_batch(batch) for batch in batches], 1)
    store = open_store(reference)
    was, single_rows.ENABLED = single_rows.ENABLED, False
    try:
        for at, batch in enumerate(batches):
            store.ingest(batch, CLOCK_OFFSET_NS + at)
    finally:
        single_rows.ENABLED = was
        store.close()
    singles = single_row_count(served)
    assert singles > len(traffic.seqs) // 2

    for options in LISTINGS:
        lines = {
            db: json.loads(cmr("ls", "--json", "--limit", "1000", *options, "--db", db))
            for db in (served, reference)
        }
        assert lines[served] == lines[reference], options
        assert lines[served] or "running" in options, options
    everything = json.loads(cmr("ls", "--json", "--kind", "all", "--limit", "1000", "--db", served))
    assert len(everything) > singles
    for line in random.Random(1).sample(everything, 12):
        shown = {db: cmr("show", line["seq"][:12], "--db", db) for db in (served, reference)}
        assert shown[served] == shown[reference]
        assert line["root"] in shown[served]

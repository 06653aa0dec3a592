"""End to end: request-shaped traffic sent to a real ``cmr serve`` over ipc is stored as single
rows, and ``cmr ls`` (every sort and filter) and ``cmr show`` print of that file what they print
of a file the same batches were stored in with single rows off."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

from benchmarks.serve import serve_chunk
from cmr.store import open_store, single_rows
from tests.cmr.conftest import CLOCK_OFFSET_NS, encode_batch
from tests.cmr.store.request_traffic import RequestTraffic

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


def test_cmr_serve_stores_requests_as_single_rows_that_cmr_ls_and_show_read_alike(
    tmp_path: Path,
) -> None:
    traffic = RequestTraffic(random.Random(6))
    batches = [batch for at in range(4) for batch in traffic.group(later=at > 0)]
    served, reference = tmp_path / "served.sqlite", tmp_path / "reference.sqlite"
    serve_chunk(tmp_path, served, 1, [encode_batch(batch) for batch in batches], 1)
    store = open_store(str(reference))
    was, single_rows.ENABLED = single_rows.ENABLED, False
    try:
        for at, batch in enumerate(batches):
            store.ingest(batch, CLOCK_OFFSET_NS + at)
    finally:
        single_rows.ENABLED = was
        store.close()
    with sqlite3.connect(served) as conn:
        query = "SELECT count(*) FROM sequences WHERE one_batch IS NOT NULL"
        (singles,) = conn.execute(query).fetchone()
    conn.close()
    assert singles > len(traffic.seqs) // 2

    for options in LISTINGS:
        lines = {
            db: json.loads(cmr("ls", "--json", "--limit", "1000", *options, "--db", str(db)))
            for db in (served, reference)
        }
        assert lines[served] == lines[reference], options
        assert lines[served] or "running" in options, options
    everything = json.loads(
        cmr("ls", "--json", "--kind", "all", "--limit", "1000", "--db", str(served))
    )
    assert len(everything) > singles
    for line in random.Random(1).sample(everything, 12):
        shown = {db: cmr("show", line["seq"][:12], "--db", str(db)) for db in (served, reference)}
        assert shown[served] == shown[reference]
        assert line["root"] in shown[served]

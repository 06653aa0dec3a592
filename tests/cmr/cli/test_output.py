"""Standard output as a pipe: a reader that leaves early ends `cmr` quietly, with no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cmr.store import open_store
from invoseq import wire

MS = 1_000_000

SHOP = 0x1111


@pytest.mark.system
def test_a_reader_closing_the_pipe_early_is_not_an_error_report(tmp_path, make_batch):
    """`cmr show SEQ | head -1`: the output outgrows the pipe, the reader leaves; no traceback."""
    seq = bytes.fromhex("77" * 16)
    events: list[wire.Event] = [wire.Start(1, 0, 0, 1, 0, seq)]
    for iid in range(2, 20_002):
        events += [wire.Start(iid, 1, 0, 2, iid * 10, seq), wire.End(iid, iid * 10 + 5)]
    events.append(wire.End(1, 1_000_000))
    path = str(tmp_path / "big.sqlite")
    store = open_store(path)
    try:
        store.ingest(make_batch(SHOP, 0, {1: events}), 0)
    finally:
        store.close()

    with subprocess.Popen(
        [sys.executable, "-m", "cmr", "--db", path, "show", "77"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.readline().startswith("7777")
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=60)

    assert err == ""
    assert code == 0

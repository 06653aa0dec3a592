"""A large last batch, sent at exit, arrives: pyzmq sends messages of 64 KiB and more through a
garbage-collector thread that it stops at exit, before the tracer's last flush."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import cmr, cmr_json, cmr_server, run_traced, write_script

pytestmark = pytest.mark.system

WORKLOAD = """
import time
import tracer

def deep(depth, seconds):
    if depth:
        return deep(depth - 1, seconds)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

@tracer.traced
def handle():
    deep(150, 1.5)  # sampled every millisecond, 150 frames deep: some 1,500 samples of 150

handle()
"""


def test_the_last_batch_arrives_whatever_its_size(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "workload.py", WORKLOAD)
    with cmr_server(db) as endpoint:
        # Little goes out before exit (a heartbeat a second): the batches carry some 1,000
        # samples each, well over 64 KiB, and the last one is sent at exit.
        result = run_traced(
            script,
            endpoint,
            INVOSEQ_SAMPLE_INTERVAL_MS="1",
            INVOSEQ_SAMPLE_PACING="false",
            INVOSEQ_FLUSH_INTERVAL_MS="600000",
        )
    assert "internal tracer error" not in result.stderr, result.stderr
    [summary] = cmr_json(db, "ls")
    assert summary["status"] == "complete"
    stats = cmr(db, "stats").stdout
    samples = int(
        next(line.split()[-1] for line in stats.splitlines() if line.startswith("samples"))
    )
    assert samples >= 100, stats

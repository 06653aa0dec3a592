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
from tracer import _runtime

def ticks():
    sampler = _runtime.RUNTIME.sender._sampler if _runtime.RUNTIME.sender is not None else None
    return sampler.ticks if sampler is not None else 0

def deep(depth):
    if depth:
        return deep(depth - 1)
    deadline = time.monotonic() + 60  # a bound only: a loaded machine ticks slower
    while ticks() < 1000 and time.monotonic() < deadline:
        pass

@tracer.traced
def handle():
    deep(150)  # sampled every millisecond, 150 frames deep, for 1,000 ticks

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

"""Ground truth for the sampler: estimated times match what a workload really spent, within 10 %.

In wall mode the truth is each helper's wall time; in CPU mode, the CPU time its thread used.

A traced `handle()` calls three untraced helpers once each: a CPU spin (1.8 s, 60 %), a sleep
(0.9 s, 30 %) and another spin (0.3 s, 10 %), three seconds in all. (Phases much shorter than the
GIL switch interval a few times over are beyond any in-process sampler: a running thread can only
be seen when it lets the sampler take the GIL.) The workload measures each helper's real time
itself; the repository's merged tree (`cmr show --samples --json`) must give each helper's
estimated duration within 10 % of that truth, at the default 10 ms interval. The comparison is of
two measurements of the same run, so a slow or busy machine changes both alike, but for the
edges of each phase: the sample that straddles one is up to an interval off (more when a busy
machine delays the sampler's tick), so each phase has two edges in all, not two per round.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import cmr_json, cmr_server, run_traced, write_script

pytestmark = [pytest.mark.system, pytest.mark.timing]

WORKLOAD = """
import json
import sys
import time
import tracer

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def crunch():   # 60 %
    spin(1.800)

def wait_io():  # 30 %
    time.sleep(0.900)

def tidy():     # 10 %
    spin(0.300)

truth = {"crunch": 0, "wait_io": 0, "tidy": 0}
cpu = {"crunch": 0, "wait_io": 0, "tidy": 0}
spans = {}  # helper -> (start, end), perf_counter_ns: the clock the tracer and sampler read
entered = []

@tracer.traced
def handle(rounds):
    entered.append(time.perf_counter_ns())
    for _ in range(rounds):
        for helper in (crunch, wait_io, tidy):
            started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
            helper()
            ended = time.perf_counter_ns()
            truth[helper.__name__] += ended - started
            cpu[helper.__name__] += time.thread_time_ns() - started_cpu
            spans[helper.__name__] = (started, ended)

handle(1)
print(json.dumps({"wall": truth, "cpu": cpu, "spans": spans, "entered": entered[0]}))
"""


def estimated(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The estimated children of a node, by function name."""
    return {c["name"]: c for c in node["children"] if c["kind"] == "estimated"}


@pytest.mark.parametrize("mode", ["wall", "cpu"])
def test_estimated_durations_match_the_truth_within_ten_percent(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "workload.py", WORKLOAD)
    with cmr_server(db) as endpoint:
        result = run_traced(script, endpoint, INVOSEQ_SAMPLE_MODE=mode)
    measured = json.loads(result.stdout)
    truth = measured[mode]  # wall mode estimates wall time; CPU mode, CPU time
    [summary] = cmr_json(db, "ls")
    root = cmr_json(db, "show", summary["seq"], "--samples")["root"]
    assert root["name"] == "__main__.handle"
    helpers = estimated(root)
    # Every estimate's bounds hold where the helper really ran. The workload's clock is the
    # tracer's (perf_counter); the root's start anchors it to the repository's wall clock, to
    # within the few microseconds between the root's Start and the workload's first reading.
    offset = root["start_ns"] - measured["entered"]
    anchor = 1_000_000  # ns of slack for that anchoring, far below an interval (10 ms)
    for name, node in helpers.items():
        start, end = (t + offset for t in measured["spans"][name])
        bounds = node["bounds"]
        assert bounds["start_min_ns"] - anchor <= start <= bounds["start_max_ns"] + anchor, name
        assert bounds["end_max_ns"] is not None, name
        assert bounds["end_min_ns"] - anchor <= end <= bounds["end_max_ns"] + anchor, name
    if mode == "wall":
        for name in ("crunch", "wait_io", "tidy"):
            assert helpers[name]["duration_ns"] == pytest.approx(truth[name], rel=0.10), name
        # Wall mode sees the sleep, and its samples say it was off the CPU.
        sleep_cpu = helpers["wait_io"]["samples"]["cpu_ns"]
        assert sleep_cpu < 0.10 * helpers["wait_io"]["duration_ns"]
        spin_cpu = helpers["crunch"]["samples"]["cpu_ns"]
        assert spin_cpu > 0.5 * helpers["crunch"]["duration_ns"]
    else:
        # CPU mode samples running threads only and counts their CPU time: the spins are there,
        # the sleep is not.
        for name in ("crunch", "tidy"):
            assert helpers[name]["duration_ns"] == pytest.approx(truth[name], rel=0.10), name
        asleep = helpers.get("wait_io")  # at most the CPU of waking up: nothing of the wait
        assert asleep is None or asleep["duration_ns"] < 0.05 * measured["wall"]["wait_io"]

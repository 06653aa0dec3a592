"""Sequences across processes: multiprocessing (fork, spawn, forkserver), pools, bare fork.

Every case runs a real program in a subprocess, sending to a real `cmr serve`; the trees are read
back with `cmr show --json` and compared with trees written out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.processes.stored import LEAF, sequences, tree
from tests.support import (
    cmr_json,
    cmr_server,
    run_traced,
    shape,
    show_every_sequence,
    write_script,
)

PROCESS = """
import multiprocessing as mp
import sys
import tracer

tracer.configure(instrument=True)

@tracer.traced
def child_work(n):
    return leaf(n)

@tracer.traced
def leaf(n):
    return n

def untraced_target(n):
    leaf(n)

@tracer.traced
def parent(method):
    context = mp.get_context(method)
    for target in (child_work, untraced_target):
        process = context.Process(target=target, args=(1,))
        process.start()
        process.join(60)
        assert process.exitcode == 0, process.exitcode

if __name__ == "__main__":
    parent(sys.argv[1])
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_process_children_continue_the_sequence(tmp_path: Path, method: str) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "procs.py", PROCESS)
    with cmr_server(db) as endpoint:
        run_traced(script, endpoint, args=[method])
    [summary] = sequences(db)
    assert summary["processes"] == 3
    # Every child told the repository it ended: a forked one leaves by os._exit with atexit
    # cleared, so the tracer shuts down as its process function returns; a forkserver's child
    # too, though its tracer only starts inside it (this script instruments itself at import,
    # after the fork: the server's frames say so).
    states = [process["state"] for process in cmr_json(db, "stats")["processes"]]
    assert states == ["ended"] * 3
    root = tree(db, summary["seq"])
    assert shape(root) == {
        "name": "__main__.parent",
        "status": "ok",
        "children": [
            {"name": "__main__.child_work", "status": "ok", "children": [LEAF]},
            {"name": "__main__.untraced_target", "status": "ok", "children": [LEAF]},
        ],
    }
    pids = {root["process"]["pid"]}
    for hop in root["children"]:
        assert hop["handoff"]["kind"] == "process"
        assert hop["handoff"]["queued_ns"] >= 0
        assert hop["process"]["pid"] not in pids  # a process of its own
        pids.add(hop["process"]["pid"])
        assert hop["children"][0]["process"] == hop["process"]


EXECUTOR = """
import threading
from concurrent.futures import ProcessPoolExecutor
import tracer

tracer.configure(instrument=True)

@tracer.traced
def task(i):
    return tracer.current_sequence()

@tracer.traced
def request(pool, results):
    futures = [pool.submit(task, i) for i in range(10)]
    results.append((tracer.current_sequence(), [f.result() for f in futures]))

if __name__ == "__main__":
    results = []
    with ProcessPoolExecutor(4) as pool:
        requests = [threading.Thread(target=request, args=(pool, results)) for _ in range(20)]
        for thread in requests:
            thread.start()
        for thread in requests:
            thread.join(120)
    mismatched = [seq for seq, seen in results if set(seen) != {seq}]
    print(len(results), len(mismatched))
"""


def test_process_pool_executor_concurrent_sequences_get_exactly_their_own_tasks(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "executor.py", EXECUTOR)
    with cmr_server(db) as endpoint:
        result = run_traced(script, endpoint)
    assert result.stdout == "20 0\n"  # every task ran inside its own request's sequence
    summaries = sequences(db)
    assert len(summaries) == 20
    shown = show_every_sequence(db)  # what `cmr show --json` prints, read through one store
    assert json.loads(shown[summaries[0]["seq"]])["root"] == tree(db, summaries[0]["seq"])
    worker_pids: set[int] = set()
    for summary in summaries:
        root = json.loads(shown[summary["seq"]])["root"]
        assert root["name"] == "__main__.request"
        assert [c["name"] for c in root["children"]] == ["__main__.task"] * 10
        assert {c["handoff"]["kind"] for c in root["children"]} == {"process"}
        worker_pids |= {c["process"]["pid"] for c in root["children"]}
        assert root["process"]["pid"] not in worker_pids
    assert 1 < len(worker_pids) <= 4


POOL = """
from multiprocessing import Pool
import tracer

tracer.configure(instrument=True)

@tracer.traced
def square(x):
    return x * x

def untraced_add(a, b):
    return square(a) + b

@tracer.traced
def compute():
    with Pool(2) as pool:  # leaving the block terminates the workers (SIGTERM)
        squares = pool.map(square, range(4))
        sums = pool.starmap(untraced_add, [(1, 1), (2, 2)])
        single = pool.apply_async(square, (5,)).get(60)
        streamed = sorted(pool.imap_unordered(square, range(2)))
    return squares, sums, single, streamed

if __name__ == "__main__":
    print(compute())
"""


def test_pool_tasks_are_flushed_before_the_workers_are_terminated(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "pool.py", POOL)
    with cmr_server(db) as endpoint:
        result = run_traced(script, endpoint)
    assert result.stdout == "([0, 1, 4, 9], [2, 6], 25, [0, 1])\n"
    [summary] = sequences(db)
    root = tree(db, summary["seq"])
    square = {"name": "__main__.square", "status": "ok"}
    assert shape(root) == {
        "name": "__main__.compute",
        "status": "ok",
        "children": [square] * 4
        + [{"name": "__main__.untraced_add", "status": "ok", "children": [square]}] * 2
        + [square] * 3,
    }
    assert {c["handoff"]["kind"] for c in root["children"]} == {"process"}
    assert summary["status"] == "complete"

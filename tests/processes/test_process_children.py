"""Sequences across processes the program starts itself: a bare fork, a child killed mid-call, a
Python subprocess, a Process subclass overriding run().

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
    wait_for,
    write_script,
)

FORK = """
import os
import sys
import tracer
from tracer._core import ids

tracer.configure(instrument=True)

@tracer.traced
def leaf(n):
    return n

@tracer.traced
def parent():
    puids = [ids.identity().puid]
    for n in (1, 2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            leaf(n)
            tracer.flush(30)
            os.write(write, str(ids.identity().puid).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            puids.append(int(pipe.read()))
        os.waitpid(pid, 0)
    print(json.dumps(puids))

import json
parent()
"""


def test_bare_fork_children_get_their_own_puid_and_continue_the_sequence(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "fork.py", FORK)
    with cmr_server(db) as endpoint:
        result = run_traced(script, endpoint)
    puids = json.loads(result.stdout)
    assert len(set(puids)) == 3  # pid reuse can never merge processes: each fork draws anew
    [summary] = sequences(db)
    root = tree(db, summary["seq"])
    assert shape(root) == {"name": "__main__.parent", "status": "ok", "children": [LEAF, LEAF]}
    assert [c["process"]["puid"] for c in root["children"]] == puids[1:]
    assert {c["handoff"]["kind"] for c in root["children"]} == {"process"}


KILLED = """
import os
import signal
import threading
import multiprocessing as mp
import tracer

tracer.configure(instrument=True)

@tracer.traced
def step(n):
    return n

@tracer.traced
def stuck(ready):
    step(1)
    tracer.flush(30)
    ready.set()
    threading.Event().wait(600)  # until killed

@tracer.traced
def parent():
    context = mp.get_context("fork")
    ready = context.Event()
    child = context.Process(target=stuck, args=(ready,))
    child.start()
    assert ready.wait(60)
    os.kill(child.pid, signal.SIGKILL)
    child.join(60)

if __name__ == "__main__":
    parent()
"""


def test_a_child_killed_mid_invocation_is_incomplete_and_keeps_what_it_finished(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "killed.py", KILLED)
    with cmr_server(db) as endpoint:
        run_traced(script, endpoint, INVOSEQ_HEARTBEAT_MS="100")
        [summary] = sequences(db)
        # The repository notices the silence after a few missed heartbeats (bounded wait).
        shown = wait_for(
            lambda: (
                (s := cmr_json(db, "show", summary["seq"]))["root"]["children"][0]["status"]
                == "incomplete"
                and s
            )
        )
    # The parent ended: the sequence is complete (its status is its root's), and the call its
    # child never ended outlived it (detached).
    assert (summary["status"], shown["status"]) == ("complete", "complete")
    assert shown["root"]["children"][0]["detached"] is True
    assert shape(shown["root"]) == {
        "name": "__main__.parent",
        "status": "ok",
        "children": [
            {
                "name": "__main__.stuck",
                "status": "incomplete",
                "children": [{"name": "__main__.step", "status": "ok"}],
            }
        ],
    }
    assert shown["root"]["children"][0]["end_ns"] is None


SUBPROCESS_PARENT = """
import subprocess
import sys
import tracer

tracer.configure(instrument=True)

@tracer.traced
def parent(child):
    subprocess.run([sys.executable, child], check=True, timeout=60)

parent(sys.argv[1])
"""

SUBPROCESS_CHILD = """
import os
import tracer

@tracer.traced
def child_main():
    return helper()

@tracer.traced
def helper():
    return "TRACEPARENT" in os.environ  # consumed: grandchildren get hand-offs of their own

print(child_main())
"""


def test_a_python_subprocess_continues_the_sequence(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    parent = write_script(tmp_path / "parent.py", SUBPROCESS_PARENT)
    child = write_script(tmp_path / "child.py", SUBPROCESS_CHILD)
    with cmr_server(db) as endpoint:
        result = run_traced(parent, endpoint, args=[str(child)])
    assert result.stdout == "False\n"
    [summary] = sequences(db)
    root = tree(db, summary["seq"])
    assert shape(root) == {
        "name": "__main__.parent",
        "status": "ok",
        "children": [
            {
                "name": "__main__.child_main",
                "status": "ok",
                "children": [{"name": "__main__.helper", "status": "ok"}],
            }
        ],
    }
    [hop] = root["children"]
    assert hop["handoff"]["kind"] == "process"
    assert hop["process"]["puid"] != root["process"]["puid"]


SUBCLASS = """
import multiprocessing as mp
import sys
import tracer

tracer.configure(instrument=True)

@tracer.traced
def leaf(n):
    return n

class ForkWorker(mp.get_context("fork").Process):
    def run(self):
        leaf(7)

class SpawnWorker(mp.get_context("spawn").Process):
    def run(self):
        leaf(7)

class ForkserverWorker(mp.get_context("forkserver").Process):
    def run(self):
        leaf(7)

@tracer.traced
def parent(method):
    worker = {"fork": ForkWorker, "spawn": SpawnWorker, "forkserver": ForkserverWorker}[method]()
    worker.start()
    worker.join(60)
    assert worker.exitcode == 0, worker.exitcode

if __name__ == "__main__":
    parent(sys.argv[1])
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_process_subclass_overriding_run_continues_the_sequence(
    tmp_path: Path, method: str
) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "subclass.py", SUBCLASS)
    with cmr_server(db) as endpoint:
        run_traced(script, endpoint, args=[method])
    [summary] = sequences(db)
    root = tree(db, summary["seq"])
    worker = f"__main__.{method.capitalize()}Worker.run"
    assert shape(root) == {
        "name": "__main__.parent",
        "status": "ok",
        "children": [{"name": worker, "status": "ok", "children": [LEAF]}],
    }
    assert root["children"][0]["handoff"]["kind"] == "process"
    assert cmr_json(db, "stats")["duplicate_batches"] == 0

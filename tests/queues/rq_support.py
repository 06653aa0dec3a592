"""RQ as its users run it, for the queue tests: a jobs module, a producer script that enqueues from
inside a traced call, and ``rq worker`` under ``tracer run``, each sending to a real ``cmr serve``
and taking its jobs from a real redis-server."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.processes.web_support import nodes
from tests.queues.redis_support import redis_url
from tests.support import cmr_json, cmr_server, run_traced, traced_env, wait_for, write_script

JOBS = """
import os
import pathlib
import time


def double(x):
    return x * 2


def add(x, y):
    return double(x) + y


def fail(message):
    raise ValueError(message)


def hold(flag):
    # Says it started, then waits until the test creates the file `flag` (bounded).
    pathlib.Path(flag + ".started").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not pathlib.Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()
"""

PRODUCER = """
import json
import os
import sys

from redis import Redis
from rq import Queue

import jobs
import tracer
from tracer._core import context


def enqueue(queue, what, count):
    for i in range(count):
        if what == "add":
            queue.enqueue(jobs.add, i, 1)
        elif what == "fail":
            queue.enqueue(jobs.fail, f"job {i}")
        elif what == "hold":
            queue.enqueue(jobs.hold, sys.argv[5])


@tracer.traced
def produce(queue, what, count):
    enqueue(queue, what, count)
    return tracer.current_sequence(), f"{context.current.get()[1]:016x}"


url, what, count, where = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
queue = Queue("default", connection=Redis.from_url(url))
if where == "inside":
    seq, iid = produce(queue, what, count)
else:
    seq = iid = None
    enqueue(queue, what, count)
print(json.dumps({"seq": seq, "iid": iid, "pid": os.getpid()}))
"""

#: How RQ's worker logs its start: the process that forks the horses.
STARTED = re.compile(r"started with PID (\d+)")
#: ``rq worker`` as users start it under ``tracer run``: as a module, or its console script.
#: The worker as ``python -m rq.cli`` or as the ``rq`` script installed beside this Python.
LAUNCHERS = {"module": ["-m", "rq.cli"], "script": [str(Path(sys.executable).with_name("rq"))]}


@dataclass(frozen=True, slots=True)
class Stack:
    """A redis-server, a repository and the folder holding ``jobs.py`` and ``producer.py``."""

    url: str
    endpoint: str
    db: Path
    folder: Path

    def produce(self, what: str, count: int, *, inside: bool = True, **env: str) -> Any:
        """Run the producer (instrumented), which enqueues ``count`` jobs; its JSON line."""
        where = "inside" if inside else "outside"
        args = [self.url, what, str(count), where, str(self.folder / "release")]
        result = run_traced(
            self.folder / "producer.py", self.endpoint, args, INVOSEQ_INSTRUMENT="1", **env
        )
        return json.loads(result.stdout.strip().splitlines()[-1])

    def worker_command(self, *options: str, launcher: str = "module") -> list[str]:
        return [
            sys.executable, "-m", "tracer", "run", "--include", "jobs", *LAUNCHERS[launcher],
            "worker", "--url", self.url, *options, "default",
        ]  # fmt: skip

    def run_worker(self, *options: str, launcher: str = "module") -> tuple[int, str]:
        """A burst worker until the queue is empty: (its main process's pid, its log)."""
        command = self.worker_command("--burst", *options, launcher=launcher)
        with worker_process(self, command) as process:
            stdout, stderr = process.communicate(timeout=180)
        log = stdout + stderr  # RQ logs to stdout
        assert process.returncode == 0, log
        return worker_pid(process, log), log


@contextlib.contextmanager
def stack(tmp_path: Path) -> Iterator[Stack]:
    with redis_url(tmp_path) as url, cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        write_script(tmp_path / "jobs.py", JOBS)
        write_script(tmp_path / "producer.py", PRODUCER)
        yield Stack(url, endpoint, tmp_path / "cmr.sqlite", tmp_path)


@contextlib.contextmanager
def worker_process(stack: Stack, command: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``command`` in the stack's folder, sending to its repository, in a process group of its
    own; the group killed afterwards (each horse is a group of its own: they end with their jobs,
    which are bounded)."""
    process = subprocess.Popen(
        command,
        cwd=stack.folder,
        env=traced_env(stack.endpoint, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.poll() is None:
            process.communicate(timeout=30)


def worker_pid(process: subprocess.Popen[str], log: str) -> int:
    """The worker's main process: the one ``tracer run`` started, which RQ's log names."""
    found = STARTED.search(log)
    assert found is not None, log
    assert int(found.group(1)) == process.pid, log
    return process.pid


def sequences(db: Path) -> list[dict[str, Any]]:
    """Every stored sequence's tree (``cmr show --json``)."""
    return [cmr_json(db, "show", s["seq"]) for s in cmr_json(db, "ls", "--limit", "1000")]


def tree(db: Path, seq: str, jobs: int, timeout_s: float = 30) -> dict[str, Any]:
    """The root of sequence ``seq`` once ``jobs`` job runs hang in it (bounded wait)."""

    def complete() -> dict[str, Any] | None:
        found = [s for s in cmr_json(db, "ls", "--limit", "1000") if s["seq"] == seq]
        if not found:
            return None
        root: dict[str, Any] = cmr_json(db, "show", seq)["root"]
        return root if len(job_runs(root)) >= jobs else None

    found: dict[str, Any] = wait_for(complete, timeout_s, 0.1)
    return found


def job_runs(root: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes of ``root``'s tree that are job runs (they carry the job's id)."""
    return [n for n in nodes(root) if (n["attributes"] or {}).get("messaging.message.id")]


def pid(node: dict[str, Any]) -> int:
    value: int = node["process"]["pid"]
    return value

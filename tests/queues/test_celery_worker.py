"""Celery as it is deployed: a worker started as users start it, ``tracer run --include tasks -m
celery -A tasks worker --pool=prefork -c 2 -O fair``, a producer process under ``tracer run``, a
real redis-server as broker and result backend and a real ``cmr serve``; the trees read back with
``cmr show --json``. With ``--max-tasks-per-child=1`` every run is in a child of its own, which
exits after it: every run still arrives. A fan-out of 1,000 tasks is one sequence, or with
``INVOSEQ_TASK_SEQUENCES=linked`` 1,000 sequences linked to the call that queued them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.processes.web_support import named, nodes, pid, trees
from tests.queues.redis_support import redis_url
from tests.support import (
    cmr,
    cmr_json,
    cmr_server,
    run_program,
    show_every_sequence,
    traced_env,
    write_script,
)

TASKS = """
import os

from celery import Celery

app = Celery("tasks", broker=os.environ["BROKER"], backend=os.environ["BROKER"])
app.conf.broker_connection_retry_on_startup = True


def double(x):
    return x * 2


@app.task
def add(x, y):
    return double(x) + y


@app.task
def total(values):
    return sum(values)


@app.task
def fail():
    raise ValueError("bad input")


@app.task(bind=True, max_retries=3)
def flaky(self, times):
    if self.request.retries < times:
        raise self.retry(exc=ConnectionError("down"), countdown=0)
    return self.request.retries
"""

PRODUCER = """
from celery import chain, chord, group

import tasks

TIMEOUT = 60


def main():
    published = [
        tasks.add.delay(1, 2),
        tasks.add.apply_async((3, 4)),
        tasks.app.send_task("tasks.add", (5, 6)),
        chain(tasks.add.s(1, 1), tasks.add.s(10), tasks.add.s(100)).apply_async(),
        group(tasks.add.s(i, i) for i in range(3)).apply_async(),
        chord(tasks.add.s(i, 0) for i in range(3))(tasks.total.s()),
        tasks.flaky.delay(2),
    ]
    failing = tasks.fail.delay()
    values = [result.get(timeout=TIMEOUT) for result in published]
    try:
        failing.get(timeout=TIMEOUT)
    except ValueError as exc:
        values.append(str(exc))
    return values


print(main())
print(tasks.add.delay(20, 1).get(timeout=TIMEOUT))  # module-level code: outside any sequence
"""

FAN_OUT = """
import sys

import tasks


def fan_out(n):
    results = [tasks.add.delay(i, 1) for i in range(n)]
    return sum(r.get(timeout=120) for r in results)


print(fan_out(int(sys.argv[1])))
"""

WORKER = ["-m", "celery", "-A", "tasks", "worker", "--pool=prefork", "-c", "2"]
FAIR = ["-O", "fair", "--loglevel=warning"]
FAN_OUT_TASKS = 1000


@contextmanager
def celery_worker(
    cwd: Path, endpoint: str, broker: str, *options: str
) -> Iterator[subprocess.Popen[str]]:
    """The worker under ``tracer run --include tasks``, its output in ``cwd``; stopped after the
    block with SIGTERM (Celery's warm shutdown: the pool's children exit, each sending what it
    recorded), its process group killed if it hangs."""
    command = [sys.executable, "-m", "tracer", "run", "--include", "tasks", *WORKER, *options]
    with (cwd / "worker.out").open("w") as out, (cwd / "worker.err").open("w+") as err:
        process = subprocess.Popen(
            [*command, *FAIR],
            cwd=cwd,
            env=traced_env(endpoint, BROKER=broker, PYTHONUNBUFFERED="1"),
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
                raise AssertionError(f"the worker did not stop: {_read(err)}") from None
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
        stderr = _read(err)
    assert process.returncode == 0, stderr
    assert "invoseq" not in stderr, stderr  # no integration skipped, no internal error


def _read(stream: Any) -> str:
    stream.seek(0)
    text: str = stream.read()
    return text


def produce(cwd: Path, endpoint: str, broker: str, script: str, *args: str, **env: str) -> str:
    """Run a producer script under ``tracer run --include`` its own module; its stdout."""
    command = [sys.executable, "-m", "tracer", "run", "--include", Path(script).stem, script]
    result = run_program(
        [*command, *args], cwd=cwd, env=traced_env(endpoint, BROKER=broker, **env), timeout_s=150
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def runs(root: dict[str, Any]) -> list[dict[str, Any]]:
    """Every task's run in a tree (the nodes named ``tasks.<task>``, not its callees)."""
    return [node for node in nodes(root) if node["name"] in TASK_NAMES]


TASK_NAMES = {"tasks.add", "tasks.total", "tasks.fail", "tasks.flaky"}


def test_every_way_of_publishing_continues_in_recycled_prefork_children(tmp_path: Path) -> None:
    """``--max-tasks-per-child=1``: 18 runs, 18 children, each of which exits after its run."""
    write_script(tmp_path / "tasks.py", TASKS)
    write_script(tmp_path / "producer.py", PRODUCER)
    db = tmp_path / "cmr.sqlite"
    with redis_url(tmp_path) as broker, cmr_server(db) as endpoint:
        recycling = ("--max-tasks-per-child=1",)
        with celery_worker(tmp_path, endpoint, broker, *recycling) as worker:
            printed = produce(tmp_path, endpoint, broker, "producer.py")
        assert printed.splitlines() == ["[4, 10, 16, 132, [0, 3, 6], 6, 2, 'bad input']", "41"]
        stored = trees(db)
        stats = cmr_json(db, "stats")
    [main] = [root for root in stored.values() if root["name"] == "__main__.main"]
    [outside] = [root for root in stored.values() if root["name"] == "tasks.add"]
    assert len(stored) == 2

    hops = main["children"]
    assert Counter(hop["name"] for hop in hops) == {
        "tasks.add": 10,
        "tasks.fail": 1,
        "tasks.flaky": 3,
    }
    for hop in hops:
        assert hop["handoff"]["kind"] == "remote"
        assert hop["handoff"]["queued_ns"] > 0
        assert hop["attributes"]["celery.task.name"] == hop["name"]
    for run in [*runs(main), outside]:
        if run["name"] == "tasks.add":  # the task's function, its traced callee beneath it
            assert [c["name"] for c in run["children"]][:1] == ["tasks.double"]

    # Nothing lost: every run, each in a child of its own, none in the worker's main process.
    every_run = [*runs(main), outside]
    assert len(every_run) == 18
    children = {pid(run) for run in every_run}
    assert len(children) == 18
    assert worker.pid not in children
    assert pid(main) not in children
    processes = {p["pid"]: p for p in stats["processes"]}
    assert all(processes[child]["state"] == "ended" for child in children)
    assert all(p["dropped"] == 0 for p in processes.values())

    # A chain: each step published by the run before it, so each step under it.
    [head] = [hop for hop in hops if len(named(hop, "tasks.add")) == 3]
    assert [c["name"] for c in head["children"]] == ["tasks.double", "tasks.add"]
    assert [c["name"] for c in head["children"][1]["children"]] == ["tasks.double", "tasks.add"]
    # A chord: its callback is published by the header task that ended last, under its run.
    [callback] = named(main, "tasks.total")
    [last] = [hop for hop in hops if callback in hop["children"]]
    assert callback["handoff"]["kind"] == "remote"
    assert pid(callback) != pid(last)

    [failed] = named(main, "tasks.fail")
    assert (failed["status"], failed["error"]) == ("error", "ValueError")
    assert failed["attributes"]["celery.task.state"] == "FAILURE"
    retried = named(main, "tasks.flaky")  # three runs, three invocations under the caller
    assert [r["attributes"]["celery.task.retries"] for r in retried] == [0, 1, 2]
    assert [r["attributes"]["celery.task.state"] for r in retried] == ["RETRY", "RETRY", "SUCCESS"]
    assert [r["error"] for r in retried] == ["ConnectionError", "ConnectionError", None]

    # Queued outside any sequence: the run starts one.
    assert outside["handoff"] is None
    assert outside["attributes"]["celery.task.state"] == "SUCCESS"


def test_a_fan_out_is_one_sequence_or_with_the_setting_a_thousand_linked_ones(
    tmp_path: Path,
) -> None:
    write_script(tmp_path / "tasks.py", TASKS)
    write_script(tmp_path / "fan_out.py", FAN_OUT)
    db = tmp_path / "cmr.sqlite"
    expected = str(sum(2 * i + 1 for i in range(FAN_OUT_TASKS)))
    count = str(FAN_OUT_TASKS)
    with redis_url(tmp_path) as broker, cmr_server(db) as endpoint:
        with celery_worker(tmp_path, endpoint, broker):
            one = produce(tmp_path, endpoint, broker, "fan_out.py", count)
            linked = produce(
                tmp_path, endpoint, broker, "fan_out.py", count, INVOSEQ_TASK_SEQUENCES="linked"
            )
        assert one.split() == linked.split() == [expected]
        stored = {seq: _loads(text) for seq, text in show_every_sequence(db).items()}
        listed = cmr_json(db, "ls", "--limit", "5000")
        stats = cmr_json(db, "stats")
        producers = [seq for seq, tree in stored.items() if tree["name"] == "__main__.fan_out"]
        assert len(producers) == 2
        single = max(producers, key=lambda seq: len(stored[seq]["children"]))
        [linker] = set(producers) - {single}
        # One sequence: the producer's call with 1,000 hops under it, and their callees.
        fanned = stored[single]["children"]
        assert len(fanned) == FAN_OUT_TASKS
        assert all(run["handoff"]["kind"] == "remote" for run in fanned)
        assert all([c["name"] for c in run["children"]] == ["tasks.double"] for run in fanned)
        # Linked: the producer's own sequence is its call alone; each run roots one of its own.
        assert stored[linker]["children"] == []
        roots = [tree for seq, tree in stored.items() if seq not in producers]
        assert len(roots) == FAN_OUT_TASKS
        links = {(r["attributes"]["link.seq"], r["attributes"]["link.iid"]) for r in roots}
        [(link_seq, link_iid)] = links
        assert link_seq == linker
        assert {r["attributes"]["link.kind"] for r in roots} == {"celery"}
        puid = stored[linker]["process"]["puid"]
        assert {r["attributes"]["link.puid"] for r in roots} == {f"{puid:016x}"}
        assert all(r["handoff"] is None and len(r["children"]) == 1 for r in roots)
        shown = cmr(db, "show", next(iter(set(stored) - set(producers)))).stdout
    assert f"↪ linked from {linker[:12]}:{link_iid} (celery)" in shown
    assert "link.seq" not in shown  # drawn as the line, not among the attributes
    # Nothing dropped anywhere.
    assert len(listed) == FAN_OUT_TASKS + 2
    assert not any(summary["lossy"] for summary in listed)
    assert all(process["dropped"] == 0 for process in stats["processes"])


def _loads(text: str) -> dict[str, Any]:
    root: dict[str, Any] = json.loads(text)["root"]
    return root

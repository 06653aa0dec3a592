"""RQ as users run it: a producer enqueues from inside a traced call, ``rq worker`` (under
``tracer run``) forks a work horse per job, each sending to a real ``cmr serve``. The job's run
hangs under the producer's call, after a ``remote`` hop with its queue time, in the horse's own
process, with its traced callees; a failing job is an error; a job enqueued outside any sequence
starts one; every one of many jobs arrives although each horse ends with ``os._exit``; in linked
mode each job is the root of a sequence of its own, linked to the producer's call. A worker that
keeps running sends each job as it ends and stops cleanly on SIGTERM; ``SimpleWorker`` and
``SpawnWorker`` work too; ``INVOSEQ_DISABLED_INTEGRATIONS=rq`` leaves the jobs untouched."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processes.web_support import named
from tests.queues.rq_support import (
    LAUNCHERS,
    job_runs,
    pid,
    sequences,
    stack,
    tree,
    worker_pid,
    worker_process,
)
from tests.support import cmr_json, wait_for

#: Jobs enough that a horse losing its events would show (each job is a horse of its own).
MANY = 20
#: What the job runs carry (besides their ids): ``rq.job.status`` is checked per test.
ATTRIBUTES = {
    "messaging.system": "rq",
    "messaging.destination.name": "default",
    "rq.job.origin": "default",
}


def _attributes(node: dict[str, object]) -> dict[str, object]:
    found = node["attributes"]
    assert isinstance(found, dict)
    return {k: v for k, v in found.items() if k in ATTRIBUTES}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_job_continues_the_producers_sequence_in_a_forked_horse(
    tmp_path: Path, launcher: str
) -> None:
    with stack(tmp_path) as s:
        producer = s.produce("add", 1)
        worker, _ = s.run_worker(launcher=launcher)
        root = tree(s.db, producer["seq"], jobs=1)
    assert root["name"] == "__main__.produce"
    assert pid(root) == producer["pid"]
    [job] = root["children"]
    assert (job["name"], job["status"], job["error"]) == ("jobs.add", "ok", None)
    assert job["handoff"]["kind"] == "remote"
    assert job["handoff"]["queued_ns"] > 0  # enqueue → start: the wait for the worker
    assert pid(job) not in (producer["pid"], worker)  # the horse: forked for the job
    assert _attributes(job) == ATTRIBUTES
    assert job["attributes"]["rq.job.status"] == "finished"
    assert [child["name"] for child in job["children"]] == ["jobs.double"]


def test_a_failing_job_is_an_error_named_after_its_exception(tmp_path: Path) -> None:
    with stack(tmp_path) as s:
        producer = s.produce("fail", 1)
        s.run_worker()
        root = tree(s.db, producer["seq"], jobs=1)
    [job] = root["children"]
    assert (job["name"], job["status"], job["error"]) == ("jobs.fail", "error", "ValueError")
    assert job["attributes"]["rq.job.status"] == "failed"
    assert root["status"] == "ok"  # the producer did not fail: its job did, later


def test_a_job_enqueued_outside_any_sequence_starts_its_own(tmp_path: Path) -> None:
    with stack(tmp_path) as s:
        producer = s.produce("add", 2, inside=False)
        worker, _ = s.run_worker()
        found = wait_for(lambda: len(sequences(s.db)) >= 2 and sequences(s.db), 30, 0.1)
    assert producer["seq"] is None
    assert len(found) == 2
    roots = [sequence["root"] for sequence in found]
    assert [root["name"] for root in roots] == ["jobs.add", "jobs.add"]
    for root in roots:
        assert root["handoff"] is None
        assert pid(root) != worker
        assert _attributes(root) == ATTRIBUTES
        assert [child["name"] for child in root["children"]] == ["jobs.double"]
    assert len({pid(root) for root in roots}) == 2  # a horse per job


def test_every_one_of_many_jobs_arrives_although_each_horse_ends_with_os_exit(
    tmp_path: Path,
) -> None:
    with stack(tmp_path) as s:
        producer = s.produce("add", MANY)
        worker, _ = s.run_worker()
        # Each horse flushed (acknowledged) before its os._exit, and the worker ended after the
        # last horse: everything is stored already; the bounded wait only absorbs slow storage.
        root = tree(s.db, producer["seq"], jobs=MANY, timeout_s=10)
    runs = job_runs(root)
    assert len(runs) == MANY
    assert len({run["attributes"]["messaging.message.id"] for run in runs}) == MANY
    assert all(run["status"] == "ok" and run["children"] for run in runs)
    assert len({pid(run) for run in runs} | {worker}) == MANY + 1  # one horse each
    assert all(run["handoff"]["kind"] == "remote" for run in runs)
    # and each horse told the repository it ended (not `lost`, silent after its os._exit)
    states = {p["pid"]: p["state"] for p in cmr_json(Path(s.db), "stats")["processes"]}
    assert {states[pid(run)] for run in runs} == {"ended"}


def test_linked_mode_gives_each_job_a_sequence_linked_to_the_producers_call(
    tmp_path: Path,
) -> None:
    count = 5
    with stack(tmp_path) as s:
        producer = s.produce("add", count, INVOSEQ_TASK_SEQUENCES="linked")
        s.run_worker()
        found = wait_for(lambda: len(sequences(s.db)) >= count + 1 and sequences(s.db), 30, 0.1)
    by_seq = {sequence["seq"]: sequence["root"] for sequence in found}
    produced = by_seq.pop(producer["seq"])
    assert produced["children"] == []  # no hand-off: the jobs are not in this tree
    assert len(by_seq) == count
    for root in by_seq.values():
        assert root["name"] == "jobs.add"
        assert root["handoff"] is None
        attributes = root["attributes"]
        assert attributes["link.seq"] == producer["seq"]
        assert attributes["link.iid"] == producer["iid"]
        assert attributes["link.puid"] == f"{produced['process']['puid']:016x}"
        assert attributes["link.kind"] == "rq"
        assert [child["name"] for child in root["children"]] == ["jobs.double"]


def test_a_long_running_worker_sends_each_job_and_stops_on_sigterm(tmp_path: Path) -> None:
    """Not in burst mode: each job arrives while the worker waits for more (its horse flushed),
    a job it is busy with when SIGTERM comes is finished first (RQ's warm shutdown), and the
    worker exits 0."""
    with stack(tmp_path) as s:
        command = s.worker_command()
        with worker_process(s, command) as process:
            first = s.produce("add", 1)
            root = tree(s.db, first["seq"], jobs=1, timeout_s=60)  # sent while still running
            assert process.poll() is None
            held = s.produce("hold", 1)
            wait_for((s.folder / "release.started").exists, 60)
            process.send_signal(signal.SIGTERM)  # warm shutdown: the job in hand goes on
            time.sleep(0.2)  # for the handler to run while the job is still in hand
            (s.folder / "release").touch()
            stdout, stderr = process.communicate(timeout=60)
            assert process.returncode == 0, stdout + stderr
            worker = worker_pid(process, stdout + stderr)
        held_root = tree(s.db, held["seq"], jobs=1)
    assert pid(root["children"][0]) != worker
    [job] = held_root["children"]
    assert (job["name"], job["status"]) == ("jobs.hold", "ok")
    assert "Traceback" not in stderr, stderr


def test_disabled_by_name_leaves_jobs_untouched(tmp_path: Path) -> None:
    """``INVOSEQ_DISABLED_INTEGRATIONS=rq`` in the producer: the job carries nothing, so its run
    (the worker traces it still) starts a sequence of its own."""
    with stack(tmp_path) as s:
        producer = s.produce("add", 1, INVOSEQ_DISABLED_INTEGRATIONS="rq")
        s.run_worker()
        found = wait_for(lambda: len(sequences(s.db)) >= 2 and sequences(s.db), 30, 0.1)
    by_seq = {sequence["seq"]: sequence["root"] for sequence in found}
    assert by_seq.pop(producer["seq"])["children"] == []
    [root] = by_seq.values()
    assert named(root, "jobs.add") == [root]


@pytest.mark.parametrize(
    ("worker_class", "in_worker"),
    [("rq.worker.SimpleWorker", True), ("rq.worker.SpawnWorker", False)],
    ids=["simple", "spawn"],
)
def test_other_worker_classes(tmp_path: Path, worker_class: str, in_worker: bool) -> None:
    """``SimpleWorker`` runs each job in its own process (which flushes at exit, as any);
    ``SpawnWorker`` starts a fresh interpreter per job (traced through ``tracer run``'s
    bootstrap), which also ends with ``os._exit``."""
    with stack(tmp_path) as s:
        producer = s.produce("add", 3)
        worker, _ = s.run_worker("--worker-class", worker_class)
        root = tree(s.db, producer["seq"], jobs=3, timeout_s=10)
    runs = job_runs(root)
    assert [run["name"] for run in runs] == ["jobs.add"] * 3
    assert all(run["handoff"]["kind"] == "remote" and run["children"] for run in runs)
    pids = {pid(run) for run in runs}
    if in_worker:
        assert pids == {worker}
    else:
        assert len(pids - {worker}) == 3  # a horse each


def _ended_jobs(stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sequences whose root holds a job run no longer running."""
    return [
        q
        for q in stored
        if q["root"]["children"] and q["root"]["children"][0]["status"] != "running"
    ]


def test_a_horse_ended_by_sigterm_sends_what_it_traced(tmp_path: Path) -> None:
    """RQ puts SIGTERM at its default in the horse; the tracer's handler takes it there (its
    sender started with the job's run), sends the job's start, and the horse dies by the signal:
    the job shows, incomplete."""
    with stack(tmp_path) as s:
        held = s.produce("hold", 1)
        with worker_process(s, s.worker_command("--burst")) as process:
            started = s.folder / "release.started"
            wait_for(lambda: started.exists() and started.read_text(), 60)
            os.kill(int(started.read_text()), signal.SIGTERM)
            stdout, stderr = process.communicate(timeout=60)
            assert process.returncode == 0, stdout + stderr
        # Its attributes are written when the run ends, which it never did: found by its name,
        # once the repository knows the horse is gone (its final batch, or its heartbeats
        # missed: the job shows running until then).
        found = wait_for(lambda: _ended_jobs(sequences(s.db)), 30, 0.1)
    [sequence] = found
    assert sequence["seq"] == held["seq"]
    [job] = sequence["root"]["children"]
    assert (job["name"], job["status"], job["handoff"]["kind"]) == (
        "jobs.hold",
        "incomplete",
        "remote",
    )
    assert "terminated unexpectedly" in stdout

"""The RQ integration in one process, against a real redis-server: what enqueuing writes into
``job.meta`` (a hand-off, a link, nothing outside a sequence; the caller's dict untouched), how a
job's run hangs in the trees (``SimpleWorker``, a synchronous queue), a traced job function
recorded once, the horse's flush, and patches undone exactly."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import rq.job
import rq.queue
import rq.worker
from redis import Redis
from rq import Queue, SimpleWorker
from rq.job import Job

import tracer
from tests.queues import rq_jobs
from tests.queues.redis_support import redis_url
from tracer import propagation
from tracer._core import context, decorator, ids, lifecycle
from tracer._patching.integrations import rq as integration
from tracer.testing import Capture, capture

PATCHED: list[tuple[Any, str]] = [
    (rq.queue.Queue, "create_job"),
    (rq.job.Job, "perform"),
    (rq.job.Job, "func"),
    (rq.worker.BaseWorker, "perform_job"),
]
ORIGINALS = {(owner, name): owner.__dict__[name] for owner, name in PATCHED}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(name="queue")
def _queue(tmp_path: Path) -> Iterator[Queue]:
    with redis_url(tmp_path) as url:
        connection = Redis.from_url(url)
        try:
            yield Queue("default", connection=connection)
        finally:
            connection.close()


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with capture(instrument=True) as trace:
        try:
            yield trace
        finally:
            tracer.uninstrument()


def work(queue: Queue) -> None:
    """Run every queued job in this process (``SimpleWorker`` in burst mode), then put back the
    signal handlers the worker installs."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        SimpleWorker([queue], connection=queue.connection).work(burst=True)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@tracer.traced
def produce(queue: Queue) -> list[Job]:
    return [
        queue.enqueue(rq_jobs.add, 1, 2),
        queue.enqueue(rq_jobs.traced_add, 1, 2),
        queue.enqueue(rq_jobs.fail, "no"),
        queue.enqueue(rq_jobs.Counter(3).count, 1),
    ]


@tracer.traced
def run_in(queue: Queue, job: Any) -> str | None:
    """Enqueue ``job`` (called with the queue) inside a traced call; the sequence's id."""
    job(queue)
    return tracer.current_sequence()


def test_a_job_runs_as_a_child_of_the_call_that_enqueued_it(queue: Queue, trace: Capture) -> None:
    jobs = produce(queue)
    work(queue)
    hop = {"handoff": "remote"}
    double = [{"name": "rq_jobs.traced_double"}]
    assert trace.trees(strip="tests.queues.") == [
        {
            "name": "test_rq_patching.produce",
            "children": [
                {"name": "rq_jobs.add", **hop, "children": double},
                # A traced job function is the job's invocation, not a child of it.
                {"name": "rq_jobs.traced_add", **hop, "children": double},
                {"name": "rq_jobs.fail", "status": "error", "error": "ValueError", **hop},
                {"name": "rq_jobs.Counter.count", **hop, "children": double},
            ],
        }
    ]
    runs = [i for i in trace.invocations() if i.handoff]
    assert [run.attributes for run in runs] == [
        {
            integration.SYSTEM: "rq",
            integration.JOB_ID: job.id,
            integration.QUEUE: "default",
            integration.ORIGIN: "default",
            integration.STATUS: "failed" if str(job.func_name).endswith(".fail") else "finished",
        }
        for job in jobs
    ]
    assert all(run.queued_ns is not None and run.queued_ns > 0 for run in runs)
    assert [job.get_status() for job in jobs] == ["finished", "finished", "failed", "finished"]


def test_a_traced_job_function_is_stored_by_its_name(queue: Queue, trace: Capture) -> None:
    """RQ takes the C wrapper of a traced function for a callable object (pickled, run as
    ``__call__``); it is given the function it wraps, whose dotted name finds the wrapper."""
    job = queue.enqueue(rq_jobs.traced_add, 1, 2)
    assert (job.func_name, job.instance) == ("tests.queues.rq_jobs.traced_add", None)
    assert job.description == "tests.queues.rq_jobs.traced_add(1, 2)"


def test_the_callers_meta_is_copied_and_a_traceparent_there_is_kept(
    queue: Queue, trace: Capture
) -> None:
    meta = {"user": 1}
    own = {"traceparent": TRACEPARENT}
    found: list[Job] = []

    def enqueue(q: Queue) -> None:
        found.extend(q.enqueue(rq_jobs.add, 1, 2, meta=given) for given in (meta, meta, own))

    run_in(queue, enqueue)
    assert meta == {"user": 1}  # reused for two jobs, never written into
    stored = [Job.fetch(job.id, connection=queue.connection).meta for job in found]
    assert [m.get("user") for m in stored] == [1, 1, None]
    assert stored[0]["traceparent"] != stored[1]["traceparent"]  # a fresh hand-off each
    assert stored[2] == own  # the caller's own traceparent, kept


def test_outside_any_sequence_a_job_carries_nothing_and_runs_as_a_root(
    queue: Queue, trace: Capture
) -> None:
    job = queue.enqueue(rq_jobs.add, 1, 2)
    assert Job.fetch(job.id, connection=queue.connection).meta == {}
    supervise(queue)  # the worker runs inside a traced call: the job is not its child
    supervised, job_root = trace.trees(strip="tests.queues.")
    assert supervised["name"] == "test_rq_patching.supervise"
    # Only the worker's own threads (its pubsub listener) hang under the worker's caller.
    assert "rq_jobs" not in repr(supervised)
    assert job_root == {"name": "rq_jobs.add", "children": [{"name": "rq_jobs.traced_double"}]}


@tracer.traced
def supervise(queue: Queue) -> None:
    work(queue)


def test_every_way_of_enqueuing_hands_off(queue: Queue, trace: Capture) -> None:
    jobs: list[Job] = []

    def enqueue(q: Queue) -> None:
        jobs.append(q.enqueue_call(rq_jobs.add, args=(1, 2)))
        jobs.append(q.enqueue_at(rq.utils.now() + timedelta(hours=1), rq_jobs.add, 1, 2))
        jobs.append(q.enqueue_in(timedelta(hours=1), rq_jobs.add, 1, 2))
        jobs.extend(q.enqueue_many([Queue.prepare_data(rq_jobs.add, (i, 2)) for i in range(2)]))

    seq = run_in(queue, enqueue)
    parents = set()
    for job in jobs:
        meta = Job.fetch(job.id, connection=queue.connection).meta
        parsed = propagation.parse_traceparent(meta["traceparent"])
        assert parsed is not None
        assert parsed.trace_id.hex() == seq
        parents.add(parsed.parent_id)
    assert len(parents) == len(jobs) == 5


def test_linked_mode_writes_a_link_and_the_job_roots_a_linked_sequence(queue: Queue) -> None:
    with capture(instrument=True, task_sequences="linked") as trace:
        try:
            current: list[context.Current | None] = []

            def enqueue(q: Queue) -> None:
                q.enqueue(rq_jobs.add, 1, 2)
                current.append(context.current.get())

            seq = run_in(queue, enqueue)
            work(queue)
            invocations = trace.invocations()
        finally:
            tracer.uninstrument()
    [value] = current
    assert value is not None
    iid, puid = f"{value[1]:016x}", f"{ids.identity().puid:016x}"
    [job] = [i for i in invocations if i.name == "tests.queues.rq_jobs.add"]
    assert (job.seq != seq, job.parent, job.handoff) == (True, 0, None)
    assert job.attributes is not None
    assert {k: v for k, v in job.attributes.items() if k.startswith("link.")} == {
        "link.seq": seq,
        "link.iid": iid,
        "link.puid": puid,
        "link.kind": "rq",
    }
    [stored] = [
        Job.fetch(i, connection=queue.connection) for i in queue.finished_job_registry.get_job_ids()
    ]
    assert stored.meta == {integration.LINK_KEY: f"{seq}-{iid}-{puid}"}


def test_a_synchronous_queue_runs_the_job_inside_the_call(queue: Queue, trace: Capture) -> None:
    inline = Queue("inline", connection=queue.connection, is_async=False)
    run_in(inline, lambda q: q.enqueue(rq_jobs.add, 1, 2))
    [tree] = trace.trees(strip="tests.queues.")
    assert tree["children"] == [
        {
            "name": "rq_jobs.add",
            "handoff": "remote",
            "children": [{"name": "rq_jobs.traced_double"}],
        }
    ]


def test_the_work_horse_shuts_the_tracer_down_after_its_job_and_only_the_horse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # os._exit follows in the horse: the shutdown sends what it traced and says it ended
    ended: list[bool] = []
    monkeypatch.setattr(lifecycle, "shutdown", lambda: ended.append(True))
    perform_job = integration.patch_perform_job(lambda self, job, queue, execution: "done")
    for is_horse in (False, True):
        worker = SimpleNamespace(is_horse=is_horse)
        assert perform_job(worker, None, SimpleNamespace(name="q"), None) == "done"
    assert ended == [True]


def test_untraced_sees_through_every_way_rq_holds_a_traced_function() -> None:
    raw = getattr(rq_jobs.traced_add, "__wrapped__", None)
    if raw is None:  # the function's code is traced: a copy that runs it untraced
        copy = integration.untraced(rq_jobs.traced_add)
        assert not decorator.is_traced(copy)
        assert (copy.__qualname__, copy(1, 2)) == ("traced_add", rq_jobs.traced_add(1, 2))
        bound = integration.untraced(rq_jobs.Counter(3).count)
        assert not decorator.is_traced(bound.__func__)
        assert (bound.__func__.__qualname__, bound.__self__.start) == ("Counter.count", 3)
    else:
        assert integration.untraced(rq_jobs.traced_add) is raw
        wrapper: Any = rq_jobs.traced_add
        assert integration.untraced(wrapper.__call__) is raw  # as RQ holds a "callable object"
        bound = integration.untraced(rq_jobs.Counter(3).count)
        assert (bound.__func__, bound.__self__.start) == (rq_jobs.Counter.count.__wrapped__, 3)
    assert integration.untraced(rq_jobs.double) is rq_jobs.double


def test_a_version_whose_shapes_differ_is_not_patched() -> None:
    module = ModuleType("rq.job")
    module.Job = type("Job", (), {"perform": lambda self: None, "func": None})  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        integration._job_hook(module)


def test_uninstrument_restores_every_patched_attribute(queue: Queue) -> None:
    with capture(instrument=True):
        assert all(owner.__dict__[name] is not ORIGINALS[owner, name] for owner, name in PATCHED)
        tracer.uninstrument()
    assert all(owner.__dict__[name] is ORIGINALS[owner, name] for owner, name in PATCHED)


def test_disabled_by_name(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INVOSEQ_DISABLED_INTEGRATIONS", "rq")
    with capture(instrument=True):
        try:
            assert all(owner.__dict__[name] is ORIGINALS[owner, name] for owner, name in PATCHED)
        finally:
            tracer.uninstrument()

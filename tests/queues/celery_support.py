"""What the in-process Celery tests share: an application on a real redis-server (broker and result
backend) with the tasks they run, a worker in a thread of the test process (Celery's own test
worker, solo pool: it consumes the real broker, not eager mode), and what a published message's
headers were."""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery, signals
from celery.contrib.testing.worker import start_worker

import tracer
from invoseq import wire
from tracer.testing import Capture, CapturedInvocation

TIMEOUT_S = 30.0
MODULE = __name__


@tracer.traced
def double(x: int) -> int:
    return x * 2


def add(x: int, y: int) -> int:
    return double(x) + y


def fail() -> None:
    raise ValueError("bad input")


def flaky(self: Any, times: int) -> int:
    """Succeeds on its ``times``-th retry; each earlier run asks for a retry."""
    if self.request.retries < times:
        raise self.retry(exc=ConnectionError("down"), countdown=0)
    retries: int = self.request.retries
    return retries


def total(values: list[int]) -> int:
    return sum(values)


def make_app(url: str) -> Celery:
    """An application on the redis-server at ``url``, with the tasks above (named
    ``tests.queues.celery_support.add`` and so on)."""
    app = Celery("invoseq_tests", broker=url, backend=url, set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        task_default_retry_delay=0,
        worker_hijack_root_logger=False,
    )
    for function in (add, fail, total):
        app.task(function)
    app.task(bind=True, max_retries=3)(flaky)
    app.finalize()
    return app


@contextmanager
def worker(app: Celery) -> Iterator[None]:
    """A worker consuming the app's queue in a thread of this process (no context attached to
    it), stopped after the block, the root logger's level and handlers restored."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=TIMEOUT_S):
            yield
    finally:  # the worker sets the root logger up for itself: the next test gets it back as it was
        root.setLevel(level)
        root.handlers[:] = handlers


@contextmanager
def published() -> Iterator[queue.Queue[dict[str, Any]]]:
    """The headers of every message published during the block, as they went out
    (``after_task_publish``: after every receiver of ``before_task_publish``, ours included)."""
    sent: queue.Queue[dict[str, Any]] = queue.Queue()

    def receive(headers: Any = None, **_: Any) -> None:
        sent.put(dict(headers))

    signals.after_task_publish.connect(receive, weak=False, dispatch_uid="invoseq-test-published")
    try:
        yield sent
    finally:
        signals.after_task_publish.disconnect(dispatch_uid="invoseq-test-published")


def drain(sent: queue.Queue[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    while not sent.empty():
        found.append(sent.get_nowait())
    return found


def handoffs(trace: Capture) -> dict[int, wire.Handoff]:
    """Every hand-off captured, by hid (flushing first)."""
    trace.flush()
    return {
        event.hid: event
        for batch in trace.batches
        for chunk in batch.chunks
        for event in chunk.events
        if isinstance(event, wire.Handoff)
    }


def named(trace: Capture, name: str) -> list[CapturedInvocation]:
    return [i for i in trace.invocations() if i.name == f"{MODULE}.{name}"]

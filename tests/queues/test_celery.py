"""The Celery integration in one process, against a real redis-server: what a published message
carries (a fresh hand-off from the calling invocation, in every way of publishing; a link in linked
mode; nothing outside any sequence), and what a worker (Celery's test worker in a thread, solo
pool, consuming the real broker) makes of it: the run a child of the caller, named after the task's
function, its callees beneath it, its state, a failure's error, retries as new invocations under
the same parent; the receivers connected and disconnected exactly. The worker processes of a real
deployment: test_celery_worker.py."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, chain, group, signals

import tracer
from tests.queues.celery_support import (
    MODULE,
    TIMEOUT_S,
    drain,
    handoffs,
    make_app,
    named,
    published,
    worker,
)
from tests.queues.redis_support import redis_url
from tracer import propagation
from tracer._core.ids import as_hid, identity
from tracer._patching.integrations import DISABLED_ENV
from tracer._patching.integrations import celery as integration
from tracer.testing import Capture, CapturedInvocation, capture

HERE = __name__


@pytest.fixture(name="app")
def _app(tmp_path: Path) -> Iterator[Celery]:
    with redis_url(tmp_path) as url:
        app = make_app(url)
        try:
            yield app
        finally:
            gc.collect()  # its results' finalizers talk to the server: run them while it lives
            app.close()


def _traced(trace_settings: dict[str, Any]) -> Iterator[Capture]:
    with capture(instrument=True, **trace_settings) as trace:
        try:
            yield trace
        finally:
            tracer.uninstrument()


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    yield from _traced({})


@pytest.fixture(name="linked")
def _linked() -> Iterator[Capture]:
    yield from _traced({"task_sequences": "linked"})


def task(app: Celery, name: str) -> Any:
    return app.tasks[f"{MODULE}.{name}"]


@tracer.traced
def produce(publish: Any) -> Any:
    return publish()


def the_producer(trace: Capture) -> CapturedInvocation:
    [producer] = [i for i in trace.invocations() if i.name == f"{HERE}.produce"]
    return producer


# -- publishing ----------------------------------------------------------------------------------


def test_every_way_of_publishing_hands_off_from_the_calling_invocation(
    app: Celery, trace: Capture
) -> None:
    add = task(app, "add")

    def publish() -> None:
        add.delay(1, 2)
        add.apply_async((1, 2), headers={"x-caller": "kept"})
        app.send_task(f"{MODULE}.add", (1, 2))
        group(add.s(i, i) for i in range(3)).apply_async()
        chain(add.s(1, 1), add.s(2)).apply_async()  # the worker publishes the second step

    with published() as sent:
        produce(publish)
    messages = drain(sent)
    assert len(messages) == 7
    producer = the_producer(trace)
    recorded = handoffs(trace)
    hids = set()
    for headers in messages:
        parsed = propagation.parse_traceparent(headers[propagation.TRACEPARENT])
        assert parsed is not None
        assert parsed.trace_id.hex() == producer.seq
        hid = as_hid(parsed.parent_id)
        assert (recorded[hid].kind, recorded[hid].parent) == ("remote", producer.iid)
        assert headers[propagation.TRACESTATE] == f"invoseq={identity().puid:x}"
        assert integration.LINK_HEADER not in headers
        hids.add(hid)
    assert len(hids) == 7  # a fresh hand-off each
    assert messages[1]["x-caller"] == "kept"


def test_a_headers_dict_nested_in_the_message_carries_the_hand_off_too(
    app: Celery, trace: Capture
) -> None:
    with published() as sent:
        produce(lambda: task(app, "add").apply_async((1, 2), headers={"headers": {"a": "b"}}))
    [headers] = drain(sent)
    assert headers["headers"][propagation.TRACEPARENT] == headers[propagation.TRACEPARENT]
    assert headers["headers"]["a"] == "b"


def test_outside_any_sequence_a_message_goes_as_the_caller_made_it(
    app: Celery, trace: Capture
) -> None:
    foreign = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    add = task(app, "add")
    with published() as sent:
        add.delay(1, 2)
        add.apply_async((1, 2), headers={propagation.TRACEPARENT: foreign})
    plain, carried = drain(sent)
    assert propagation.TRACEPARENT not in plain
    assert integration.LINK_HEADER not in plain
    assert carried[propagation.TRACEPARENT] == foreign
    assert handoffs(trace) == {}


def test_linked_mode_carries_a_link_to_the_calling_invocation_and_hands_nothing_off(
    app: Celery, linked: Capture
) -> None:
    with published() as sent:
        produce(lambda: task(app, "add").delay(1, 2))
    [headers] = drain(sent)
    producer = the_producer(linked)
    link = f"{producer.seq}-{producer.iid:016x}-{identity().puid:016x}"
    assert headers[integration.LINK_HEADER] == link
    assert propagation.TRACEPARENT not in headers
    assert handoffs(linked) == {}


def test_an_eager_apply_is_a_direct_child_of_its_caller(app: Celery, trace: Capture) -> None:
    assert produce(lambda: task(app, "add").apply((2, 3)).get()) == 7
    producer = the_producer(trace)
    [run] = named(trace, "add")
    [callee] = named(trace, "double")
    assert (run.parent, run.seq, run.handoff, run.status) == (
        producer.iid,
        producer.seq,
        None,
        "ok",
    )
    assert callee.parent == run.iid


# -- running -------------------------------------------------------------------------------------


def test_a_run_continues_the_sequence_under_its_caller_with_its_callees(
    app: Celery, trace: Capture
) -> None:
    with worker(app):
        result = produce(lambda: task(app, "add").delay(2, 3).get(timeout=TIMEOUT_S))
    assert result == 7
    producer = the_producer(trace)
    [run] = named(trace, "add")
    [callee] = named(trace, "double")
    assert (run.parent, run.seq, run.handoff, run.status) == (
        producer.iid,
        producer.seq,
        "remote",
        "ok",
    )
    assert run.tid != producer.tid  # the worker's thread
    assert run.queued_ns is not None
    assert run.queued_ns > 0
    assert run.attributes is not None
    assert run.attributes[integration.NAME] == f"{MODULE}.add"
    assert isinstance(run.attributes[integration.ID], str)
    assert run.attributes[integration.RETRIES] == 0
    assert run.attributes[integration.STATE] == "SUCCESS"
    assert (callee.parent, callee.seq) == (run.iid, producer.seq)


def test_a_failure_is_an_error_and_each_retry_a_new_invocation_under_the_same_parent(
    app: Celery, trace: Capture
) -> None:
    def publish() -> int:
        failing = task(app, "fail").delay()
        with pytest.raises(ValueError, match="bad input"):
            failing.get(timeout=TIMEOUT_S)
        retried: int = task(app, "flaky").delay(2).get(timeout=TIMEOUT_S)
        return retried

    with worker(app):
        assert produce(publish) == 2
    producer = the_producer(trace)
    [failed] = named(trace, "fail")
    assert (failed.parent, failed.status, failed.error) == (producer.iid, "error", "ValueError")
    assert failed.attributes is not None
    assert failed.attributes[integration.STATE] == "FAILURE"
    runs = named(trace, "flaky")
    assert [r.parent for r in runs] == [producer.iid] * 3
    assert [r.handoff for r in runs] == ["remote"] * 3
    assert [r.error for r in runs] == ["ConnectionError", "ConnectionError", None]
    attributes = [r.attributes or {} for r in runs]
    assert [a[integration.RETRIES] for a in attributes] == [0, 1, 2]
    assert [a[integration.STATE] for a in attributes] == ["RETRY", "RETRY", "SUCCESS"]
    assert len({a[integration.ID] for a in attributes}) == 1
    # The retried messages carry the first message's hand-off: queued since the first publish.
    assert [r.queued_ns or 0 for r in runs] == sorted(r.queued_ns or 0 for r in runs)


def test_a_task_queued_outside_any_sequence_starts_one_and_its_retry_links_to_it(
    app: Celery, trace: Capture
) -> None:
    with worker(app):
        assert task(app, "flaky").delay(1).get(timeout=TIMEOUT_S) == 1
        garbage = {integration.LINK_HEADER: "not-a-link"}
        assert task(app, "add").apply_async((1, 1), headers=garbage).get(timeout=TIMEOUT_S) == 3
    first, retried = named(trace, "flaky")
    assert (first.parent, first.handoff) == (0, None)
    assert first.seq != retried.seq
    assert (retried.parent, retried.handoff) == (0, None)
    assert retried.attributes is not None
    assert {k: v for k, v in retried.attributes.items() if k.startswith("link.")} == {
        "link.seq": first.seq,
        "link.iid": f"{first.iid:016x}",
        "link.puid": f"{identity().puid:016x}",
        "link.kind": "celery.retry",
    }
    [plain] = named(trace, "add")
    assert (plain.parent, plain.handoff) == (0, None)
    assert plain.attributes is not None
    assert "link.seq" not in plain.attributes


def test_linked_mode_a_run_is_the_root_of_a_sequence_linked_to_its_producer(
    app: Celery, linked: Capture
) -> None:
    with worker(app):
        assert produce(lambda: task(app, "add").delay(2, 3).get(timeout=TIMEOUT_S)) == 7
    producer = the_producer(linked)
    [run] = named(linked, "add")
    [callee] = named(linked, "double")
    assert run.seq != producer.seq
    assert (run.parent, run.handoff) == (0, None)
    assert run.attributes is not None
    assert run.attributes["link.seq"] == producer.seq
    assert run.attributes["link.iid"] == f"{producer.iid:016x}"
    assert run.attributes["link.kind"] == "celery"
    assert (callee.parent, callee.seq) == (run.iid, run.seq)


# -- connecting ----------------------------------------------------------------------------------


def _receivers() -> dict[str, list[Any]]:
    return {name: list(getattr(signals, name).receivers) for name in integration.SIGNALS}


def _ours(name: str) -> int:
    uid = integration.DISPATCH_UID.format(name)
    return sum(1 for key, _ in getattr(signals, name).receivers if key[0] == uid)


def test_instrument_connects_each_receiver_once_and_uninstrument_disconnects_exactly() -> None:
    before = _receivers()
    try:
        tracer.instrument()
        tracer.instrument()  # uninstalls first: still one of each
        assert {name: _ours(name) for name in integration.SIGNALS} == dict.fromkeys(
            integration.SIGNALS, 1
        )
    finally:
        tracer.uninstrument()
    assert _receivers() == before


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_the_integration_switches_off_by_name(
    app: Celery, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _receivers()
    if how == "environment":
        monkeypatch.setenv(DISABLED_ENV, "celery")
    with capture() as trace:
        try:
            tracer.instrument(disable=["celery"] if how == "argument" else None)
            assert _receivers() == before
            with published() as sent:
                produce(lambda: task(app, "add").delay(1, 2))
            [headers] = drain(sent)
        finally:
            tracer.uninstrument()
    assert propagation.TRACEPARENT not in headers
    assert handoffs(trace) == {}

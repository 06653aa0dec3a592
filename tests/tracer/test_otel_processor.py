"""``InvocationSpanProcessor``: every OpenTelemetry span becomes a measured node of the sequence."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import Status, StatusCode, Tracer

import tracer
from invoseq import wire
from tracer import otel
from tracer._core import decorator, ids, recorder
from tracer.otel import InvocationSpanProcessor, SequenceIdGenerator
from tracer.testing import Capture, CapturedInvocation, capture


@pytest.fixture(name="captured")
def _captured() -> Iterator[Capture]:
    with capture(sample_interval_ms=0) as captured:
        yield captured


@pytest.fixture(name="spans")
def _spans() -> Iterator[Tracer]:
    provider = TracerProvider()
    provider.add_span_processor(InvocationSpanProcessor())
    yield provider.get_tracer("shop.db", "1.0")
    provider.shutdown()


def by_name(captured: Capture) -> dict[str, CapturedInvocation]:
    return {i.name: i for i in captured.invocations()}


@tracer.traced
def leaf() -> str | None:
    return tracer.current_sequence()


def test_a_span_inside_a_traced_call_is_a_child_node_with_its_attributes(
    captured: Capture, spans: Tracer
) -> None:
    @tracer.traced
    def checkout() -> None:
        with spans.start_as_current_span("SELECT", attributes={"db.system": "sqlite", "rows": 3}):
            pass

    checkout()
    assert captured.trees(strip="tests.tracer.test_otel_processor.") == [
        {
            "name": "test_a_span_inside_a_traced_call_is_a_child_node_with_its_attributes.<locals>"
            ".checkout",
            "children": [{"name": "shop.db.SELECT"}],
        }
    ]
    span = by_name(captured)["shop.db.SELECT"]
    assert span.attributes is not None
    assert span.attributes["db.system"] == "sqlite"
    assert span.attributes["rows"] == 3
    assert span.attributes[otel.SPAN_KIND] == "INTERNAL"
    assert len(str(span.attributes[otel.SPAN_ID])) == 16


def test_span_times_are_the_spans_own_on_the_tracers_clock(
    captured: Capture, spans: Tracer
) -> None:
    @tracer.traced
    def parent() -> tuple[int, int]:
        span = spans.start_span("timed")
        span.end()
        assert isinstance(span, ReadableSpan)
        return span.start_time or 0, span.end_time or 0

    start, end = parent()
    nodes = by_name(captured)
    node = nodes["shop.db.timed"]
    outer = next(i for i in nodes.values() if i.name.endswith("parent"))
    assert node.end_ns is not None
    assert outer.end_ns is not None
    assert outer.start_ns <= node.start_ns <= node.end_ns <= outer.end_ns
    # The span's own duration: converting both ends reads the clocks twice, which may differ by
    # a little, never by the 10 ms allowed here.
    assert abs((node.end_ns - node.start_ns) - (end - start)) < 10_000_000


def test_an_explicit_start_and_end_time_is_kept(captured: Capture, spans: Tracer) -> None:
    span = spans.start_span("backdated", start_time=1_000_000_000_000)
    span.end(end_time=1_000_250_000_000)
    (node,) = captured.invocations()
    assert node.end_ns is not None
    assert abs((node.end_ns - node.start_ns) - 250_000_000) < 10_000_000


def test_an_error_status_ends_the_node_with_the_recorded_exception_type(
    captured: Capture, spans: Tracer
) -> None:
    class PaymentDeclinedError(Exception):
        pass

    with pytest.raises(PaymentDeclinedError), spans.start_as_current_span("charge"):
        raise PaymentDeclinedError("card expired")
    span = spans.start_span("status only")
    span.set_status(Status(StatusCode.ERROR, "HTTP 503"))
    span.end()
    nodes = by_name(captured)
    charge, status_only = nodes["shop.db.charge"], nodes["shop.db.status only"]
    assert (charge.status, charge.error) == ("error", "PaymentDeclinedError")
    assert charge.attributes is not None
    assert charge.attributes["exception.message"] == "card expired"
    assert (status_only.status, status_only.error) == ("error", otel.STATUS_ERROR)
    assert status_only.attributes is not None
    assert status_only.attributes[otel.STATUS_DESCRIPTION] == "HTTP 503"


def test_outside_any_sequence_a_span_is_a_root_that_adopts_its_trace(
    captured: Capture, spans: Tracer
) -> None:
    with spans.start_as_current_span("server") as server:
        leaf()  # nests under the span's node
        with spans.start_as_current_span("query"):
            leaf()
    trace_id = f"{server.get_span_context().trace_id:032x}"
    assert captured.trees(strip="tests.tracer.test_otel_processor.") == [
        {
            "name": "shop.db.server",
            "children": [
                {"name": "leaf"},
                {"name": "shop.db.query", "children": [{"name": "leaf"}]},
            ],
        }
    ]
    assert {i.seq for i in captured.invocations()} == {trace_id}


def test_a_span_continuing_a_remote_parent_has_it_as_remote_parent(
    captured: Capture, spans: Tracer
) -> None:
    remote = extract({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"})
    with spans.start_as_current_span("GET /orders", context=remote, kind=trace.SpanKind.SERVER):
        leaf()
    server, inside = captured.invocations()
    assert server.seq == inside.seq == "0af7651916cd43dd8448eb211c80319c"
    assert inside.parent == server.iid
    assert server.attributes is not None
    assert server.attributes[otel.SPAN_KIND] == "SERVER"
    (start, *_) = [
        e for b in captured.batches for c in b.chunks for e in c.events if isinstance(e, wire.Start)
    ]
    assert (start.parent, start.hid) == (0, ids.as_hid(0x00F067AA0BA902B7))


def test_a_span_ended_in_another_thread_ends_its_node(captured: Capture, spans: Tracer) -> None:
    span = spans.start_span("handed over", attributes={"k": "v"})
    ender = threading.Thread(target=span.end)
    ender.start()
    ender.join()
    (node,) = captured.invocations()
    assert node.status == "ok"
    assert node.attributes is not None
    assert node.attributes["k"] == "v"


def test_attributes_are_cut_to_what_the_wire_takes(captured: Capture, spans: Tracer) -> None:
    many = {f"key{i}": i for i in range(100)}
    special: dict[str, Any] = {
        "long": "x" * 10_000,
        "huge": 2**70,
        "list": ["a", "b"],
        "flag": True,
        "r": 0.5,
    }
    spans.start_span("big", attributes={**many, **special}).end()
    spans.start_span("over", attributes={f"key{i}": i for i in range(200)}).end()
    nodes = by_name(captured)  # decoded by the repository's typed decoder
    over = nodes["shop.db.over"].attributes
    assert over is not None
    assert len(over) == wire.MAX_ATTRIBUTES - otel._EXTRA + 3  # + span id, trace id, kind
    attributes = nodes["shop.db.big"].attributes
    assert attributes is not None
    assert attributes["long"] == "x" * wire.MAX_ATTRIBUTE_VALUE
    assert attributes["huge"] == str(2**70)
    assert attributes["list"] == '["a","b"]'
    assert attributes["flag"] is True
    assert attributes["r"] == 0.5


def test_span_names_past_the_limit_share_one_method_and_keep_their_name(
    captured: Capture, spans: Tracer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(otel, "MAX_SPAN_NAMES", len(otel._methods))
    spans.start_span("GET /orders/1").end()
    spans.start_span("GET /orders/2").end()
    first, second = captured.invocations()
    assert first.name == second.name == f"shop.db.{otel.OTHER_SPANS}"
    assert first.attributes is not None
    assert first.attributes[otel.SPAN_NAME] == "GET /orders/1"


def test_a_failure_of_the_processor_is_counted_and_never_reaches_the_span(
    captured: Capture, spans: Tracer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> int:
        raise RuntimeError("no ids")

    monkeypatch.setattr(decorator, "_next_iid", broken)
    errors = recorder.internal_errors()
    with spans.start_as_current_span("survives") as span:
        span.set_attribute("k", 1)
    assert recorder.internal_errors() == errors + 1
    monkeypatch.undo()
    assert captured.invocations() == []


def test_with_tracing_disabled_spans_record_nothing(spans: Tracer) -> None:
    with capture(sample_interval_ms=0, enabled=False) as captured:
        spans.start_span("off").end()
        assert captured.invocations() == []


def test_the_sequence_id_generator_gives_spans_the_sequence_as_trace_id(captured: Capture) -> None:
    provider = TracerProvider(id_generator=SequenceIdGenerator())
    provider.add_span_processor(InvocationSpanProcessor())
    spans = provider.get_tracer("ids")

    @tracer.traced
    def work() -> tuple[str | None, int]:
        with spans.start_as_current_span("inner") as span:
            return tracer.current_sequence(), span.get_span_context().trace_id

    seq, trace_id = work()
    assert f"{trace_id:032x}" == seq
    with spans.start_as_current_span("outside") as span:
        assert span.get_span_context().is_valid
    provider.shutdown()


def test_force_flush_sends_what_is_buffered(captured: Capture, spans: Tracer) -> None:
    spans.start_span("flushed").end()
    assert InvocationSpanProcessor().force_flush(10_000)
    assert [i.name for i in captured.invocations()] == ["shop.db.flushed"]


def test_a_traced_call_in_a_thread_running_the_spans_context_nests_under_its_node(
    captured: Capture, spans: Tracer
) -> None:
    with spans.start_as_current_span("job") as span:
        context = contextvars.copy_context()  # what an executor given ctx.run carries over
        worker = threading.Thread(target=context.run, args=(leaf,))
        worker.start()
        worker.join()
    job, inside = captured.invocations()
    assert job.name == "shop.db.job"
    assert (inside.parent, inside.seq) == (job.iid, f"{span.get_span_context().trace_id:032x}")
    assert inside.tid != job.tid

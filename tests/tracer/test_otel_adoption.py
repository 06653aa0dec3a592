"""A root invocation that starts while an OpenTelemetry span is current joins that span's trace.

The suite runs once with the C accelerator and once with ``INVOSEQ_PURE=1``, so every test here
checks whichever hot path is active; the byte-for-byte comparison of both runs in subprocesses.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import tracer
from invoseq import wire
from tests.support import write_script
from tests.tracer.core.implementations import RAW_TRANSPORT, needs_c_build, run
from tracer._core import decorator, ids, recorder
from tracer.testing import Capture, capture

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0x00F067AA0BA902B7


def remote_span(
    trace_id: int = TRACE_ID, span_id: int = SPAN_ID, *, sampled: bool = True
) -> NonRecordingSpan:
    """A span as an extracted traceparent gives it: what a server instrumentation makes current."""
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=True, trace_flags=flags))


@tracer.traced
def leaf() -> str | None:
    return tracer.current_sequence()


@tracer.traced
def handler() -> str | None:
    leaf()
    return tracer.current_sequence()


@tracer.traced
async def coroutine() -> str | None:
    await asyncio.sleep(0)
    return leaf()


@tracer.traced
def numbers(n: int) -> Iterator[int]:
    for i in range(n):
        leaf()
        yield i


@tracer.traced
async def async_numbers(n: int) -> AsyncIterator[int]:
    for i in range(n):
        leaf()
        yield i


async def collect(n: int) -> list[int]:
    return [i async for i in async_numbers(n)]


def starts(trace: Capture) -> list[wire.Start]:
    trace.flush()
    return [
        event
        for batch in trace.batches
        for chunk in batch.chunks
        for event in chunk.events
        if isinstance(event, wire.Start)
    ]


@pytest.fixture(name="captured")
def _captured() -> Iterator[Capture]:
    with capture(sample_interval_ms=0) as captured:
        yield captured


RUNS: dict[str, Any] = {
    "sync": handler,
    "coroutine": lambda: asyncio.run(coroutine()),
    "generator": lambda: list(numbers(2)),
    "async generator": lambda: asyncio.run(collect(2)),
}


@pytest.mark.parametrize("kind", list(RUNS))
def test_a_root_started_inside_a_span_adopts_its_trace_with_the_span_as_remote_parent(
    captured: Capture, kind: str
) -> None:
    with trace_use(remote_span()):
        RUNS[kind]()
    root, *nested = starts(captured)
    assert root.seq == TRACE_ID.to_bytes(16, "big")
    assert (root.parent, root.hid) == (0, SPAN_ID)
    assert nested, "the nested calls were recorded"
    assert all(start.seq == root.seq and start.hid == 0 for start in nested)
    assert all(start.parent != 0 for start in nested)


def trace_use(span: otel_trace.Span) -> Any:
    return otel_trace.use_span(span, end_on_exit=False)


def test_the_adopted_start_is_what_extracting_the_spans_traceparent_gives(
    captured: Capture,
) -> None:
    header = f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"
    with tracer.continue_from({"traceparent": header}):
        leaf()
    with trace_use(remote_span()):
        leaf()
    extracted, adopted = starts(captured)
    assert (adopted.seq, adopted.parent, adopted.hid) == (
        extracted.seq,
        extracted.parent,
        extracted.hid,
    )


def test_an_unsampled_span_is_adopted_too(captured: Capture) -> None:
    with trace_use(remote_span(sampled=False)):
        assert handler() == f"{TRACE_ID:032x}"


def test_a_span_id_over_63_bits_becomes_a_non_zero_63_bit_hand_off_id(captured: Capture) -> None:
    with trace_use(remote_span(span_id=2**63)):
        leaf()
    with trace_use(remote_span(span_id=2**64 - 1)):
        leaf()
    assert [start.hid for start in starts(captured)] == [2**63 - 1, 2**63 - 1]
    assert ids.as_hid(2**63 + 5) == 5


def test_an_sdk_span_made_current_is_adopted(captured: Capture) -> None:
    otel = TracerProvider().get_tracer("shop")
    with otel.start_as_current_span("request") as span:
        assert handler() == f"{span.get_span_context().trace_id:032x}"
    (root, _) = starts(captured)
    assert root.hid == ids.as_hid(span.get_span_context().span_id)


def test_outside_any_span_and_with_an_invalid_span_a_root_draws_a_new_sequence(
    captured: Capture,
) -> None:
    first = handler()
    with trace_use(otel_trace.INVALID_SPAN):
        second = handler()
    assert first is not None
    assert second is not None
    assert len({first, second, f"{TRACE_ID:032x}"}) == 3
    assert all(
        start.hid == 0 and start.seq != TRACE_ID.to_bytes(16, "big") for start in starts(captured)
    )


def test_calls_inside_a_sequence_never_look_at_the_span(captured: Capture) -> None:
    @tracer.traced
    def outer() -> str | None:
        with trace_use(remote_span()):  # current only inside the invocation
            return leaf()

    seq = outer()
    assert seq != f"{TRACE_ID:032x}"
    assert {start.seq for start in starts(captured)} == {bytes.fromhex(seq or "")}


def test_a_failing_adoption_is_counted_and_the_call_still_runs(
    captured: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("adoption failed")

    monkeypatch.setattr(decorator, "_adopt", broken)
    errors = recorder.internal_errors()
    with trace_use(remote_span()):
        assert leaf() is None  # untraced: no sequence
    assert recorder.internal_errors() == errors + 1
    assert starts(captured) == []


def test_adoption_can_be_turned_off_by_replacing_the_source(
    captured: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decorator, "_adopt", lambda: None)
    with trace_use(remote_span()):
        assert handler() != f"{TRACE_ID:032x}"


# -- both implementations side by side ---------------------------------------------------------

ADOPTING_PROGRAM = (
    """
import asyncio, itertools, json, threading
import msgspec
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
import tracer
from tracer._core import decorator, ids
from invoseq import wire
from tracer import otel, _runtime as runtime
from tracer.otel import InvocationSpanProcessor

times = itertools.count(1000, 7)
seqs = itertools.count(1)
decorator._clock = lambda: next(times)
decorator._new_seq = lambda: next(seqs).to_bytes(16, "big")
otel._monotonic = lambda wall: wall  # span times as given (they are fixed below)
ids._identity = ids.ProcessIdentity(1, 2, "host", "platform", 0, 0, ("prog",))
threading.get_native_id = lambda: 7

class Counting(IdGenerator):
    def __init__(self):
        self.ids = itertools.count(0x1234)
    def generate_span_id(self):
        return next(self.ids)
    def generate_trace_id(self):
        return 0xABCDEF << 64 | next(self.ids)

provider = TracerProvider(id_generator=Counting())
provider.add_span_processor(InvocationSpanProcessor())
spans = provider.get_tracer("demo.scope")
"""
    + RAW_TRANSPORT
    + """
@tracer.traced
def leaf(x):
    return x + 1

@tracer.traced
async def coroutine():
    return leaf(1)

@tracer.traced
def numbers(n):
    for i in range(n):
        yield leaf(i)

def remote(span_id):
    context = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, span_id, is_remote=True,
                          trace_flags=TraceFlags(span_id % 2))
    return trace.use_span(NonRecordingSpan(context), end_on_exit=False)

tracer.configure(flush_interval_ms=3_600_000, heartbeat_ms=3_600_000, batch_events=4,
                 spool_bytes=0, sample_interval_ms=0)
leaf(0)                                  # no span: a sequence of its own
with remote(0x00F067AA0BA902B7):
    leaf(1)                              # adopted, sync
    asyncio.run(coroutine())             # adopted, coroutine
    list(numbers(2))                     # adopted, generator
with remote(2**64 - 1):
    leaf(2)                              # a span id over 63 bits
span = spans.start_span("GET", start_time=5_000, attributes={"http.method": "GET", "n": 3,
                                                              "big": 2**70, "l": [1, "a"]})
with trace.use_span(span, end_on_exit=False):
    leaf(3)                              # under the span's node
span.end(end_time=9_000)
assert runtime.flush(30)
tracer.shutdown(30)
print(json.dumps({"implementation": decorator.IMPLEMENTATION, "bodies": bodies}))
"""
)


@needs_c_build
@pytest.mark.system
def test_both_implementations_send_byte_identical_batches_for_adopted_roots(
    tmp_path: Path,
) -> None:
    script = write_script(tmp_path / "program.py", ADOPTING_PROGRAM)
    pure = json.loads(run(script, pure=True))
    accelerated = json.loads(run(script, pure=False))
    assert (pure["implementation"], accelerated["implementation"]) == ("python", "c")
    assert accelerated["bodies"] == pure["bodies"]

    # What was compared holds adopted roots and a span's node with its attributes.
    import msgspec

    batches = [msgspec.msgpack.decode(bytes.fromhex(body)) for body in pure["bodies"]]
    events = [event for batch in batches for _, chunk in batch[5] for event in chunk]
    adopted = [e for e in events if e[0] == wire.TAG_START and e[6] == TRACE_ID.to_bytes(16, "big")]
    assert [e[3] for e in adopted if e[2] == 0] == [SPAN_ID] * 3 + [2**63 - 1]
    (attrs,) = [e for e in events if e[0] == wire.TAG_ATTRS]
    assert attrs[2]["http.method"] == "GET"
    assert attrs[2]["big"] == str(2**70)

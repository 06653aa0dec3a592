"""OpenTelemetry spans as measured invocations: ``InvocationSpanProcessor``.

    from opentelemetry.sdk.trace import TracerProvider
    from tracer.otel import InvocationSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(InvocationSpanProcessor())

More in docs/architecture.md, "tracer/otel.py".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Final

import msgspec
from opentelemetry.context import Context
from opentelemetry.trace import SpanContext, StatusCode

try:
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
except ImportError as exc:  # one line that says what to install
    raise ImportError(
        "tracer.otel needs the OpenTelemetry SDK, the otlp extra: pip install 'invoseq[otlp]'",
        name=exc.name,
    ) from exc

from invoseq import wire
from tracer import _runtime as runtime
from tracer._core import adoption, budget, context, decorator, forking, ids, recorder, stack

#: Distinct (instrumentation scope, span name) pairs interned as methods; past this many, a span
#: is named ``OTHER_SPANS`` (its name stays in its attributes), so a span name with an id in it
#: cannot grow the method table without bound.
__all__ = [
    "InvocationSpanProcessor",
    "SequenceIdGenerator",
    "attributes",
]

MAX_SPAN_NAMES: Final = 4096
OTHER_SPANS: Final = "<other span names>"
UNKNOWN_SCOPE: Final = "opentelemetry"
#: The Error event's type name for an ERROR status with no recorded exception.
STATUS_ERROR: Final = "StatusCode.ERROR"
#: Attributes the processor adds to the span's own (the span's identity, kind and status).
SPAN_ID: Final = "otel.span_id"
TRACE_ID: Final = "otel.trace_id"
SPAN_KIND: Final = "otel.kind"
SPAN_NAME: Final = "otel.span_name"
STATUS_DESCRIPTION: Final = "otel.status_description"
_EXTRA: Final = 8  # room kept for the processor's own attributes

_I64: Final = 2**63
_lock = threading.RLock()  # reentrant: a finalizer may intern too (recorder._lock)
_methods: dict[tuple[str, str], int] = {}

AttributeValue = str | int | float | bool


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()


forking.on_fork("otel", in_child=_after_fork_in_child)


class InvocationSpanProcessor(SpanProcessor):
    """Records every span of its ``TracerProvider`` as a measured invocation (module docstring)."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            _start(span)
        except Exception as exc:
            recorder.internal_error(exc)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            _end(span)
        except Exception as exc:
            recorder.internal_error(exc)

    def shutdown(self) -> None:
        """Nothing of its own to release: the tracer's sender outlives the provider."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Send what the tracer has buffered and wait (bounded) for the repository."""
        try:
            return runtime.flush(timeout_millis / 1000)
        except Exception as exc:
            recorder.internal_error(exc)
            return False


class SequenceIdGenerator(RandomIdGenerator):
    """Trace ids that are the current sequence's id: a span started inside a traced invocation
    belongs to the OpenTelemetry trace of the same id, so what it propagates (urllib's
    ``traceparent``) continues the sequence on the other side. Outside any sequence, and for
    span ids, random ids as OpenTelemetry's default generator draws them.

        TracerProvider(id_generator=SequenceIdGenerator())
    """

    def generate_trace_id(self) -> int:
        current = stack.live(context.current.get())
        if current is not None and len(current[0]) == 16:  # the sequence: any item 0 will do
            return int.from_bytes(current[0], "big")
        return super().generate_trace_id()


def _start(span: Span) -> None:
    if not decorator.recording():
        return
    own = span.get_span_context()
    if not own.is_valid:
        return
    events = recorder.thread_events()
    current = stack.capture()
    if len(events) >= events.limit and not budget.refill(events, current):
        return  # past the memory bound, as a traced call: untraced, counted as dropped
    if current is None:
        current = _root(own, span.parent)
    seq, parent, hid = current
    iid = decorator.next_iid()
    method = _method(span)
    adoption.nodes[own.span_id] = (own.trace_id, seq, iid)
    events.append((wire.TAG_START, iid, parent, hid, method, _monotonic(span.start_time), seq))


def _root(own: SpanContext, parent: SpanContext | None) -> context.Current:
    """The context value of a span that starts outside any sequence."""
    if parent is not None and parent.is_valid:
        node = adoption.nodes.get(parent.span_id)
        if node is not None and node[0] == parent.trace_id:
            return (node[1], node[2], 0)
        return (own.trace_id.to_bytes(16, "big"), 0, ids.as_hid(parent.span_id))
    return (own.trace_id.to_bytes(16, "big"), 0, 0)


def _end(span: ReadableSpan) -> None:
    own = span.get_span_context()
    if own is None:
        return
    node = adoption.nodes.get(own.span_id)
    if node is None or node[0] != own.trace_id:
        return  # not recorded: started before the processor was added, or untraced
    adoption.nodes.pop(own.span_id, None)
    iid = node[2]
    events = recorder.thread_events()
    events.append((wire.TAG_ATTRS, iid, attributes(span)))
    t_ns = _monotonic(span.end_time)
    if span.status.status_code is StatusCode.ERROR:
        events.append((wire.TAG_ERROR, iid, t_ns, _error_name(span)))
    else:
        events.append((wire.TAG_END, iid, t_ns))


def _monotonic(wall_ns: int | None) -> int:
    """A span time (wall-clock ns) on the tracer's clock, converted at the current offset."""
    now = decorator.now()
    return now if wall_ns is None else wall_ns - time.time_ns() + now


def _scope_and_name(span: ReadableSpan) -> tuple[str, str]:
    scope = span.instrumentation_scope
    return (scope.name if scope is not None and scope.name else UNKNOWN_SCOPE, span.name)


def _method(span: Span) -> int:
    key = _scope_and_name(span)
    method = _methods.get(key)
    if method is None:
        with _lock:
            method = _methods.get(key)
            if method is None:
                if len(_methods) >= MAX_SPAN_NAMES:
                    key = (key[0], OTHER_SPANS)
                    method = _methods.get(key)
                if method is None:
                    method = _methods[key] = recorder.register_method(key[0], key[1], "", 0)
    return method


def attributes(span: ReadableSpan) -> dict[str, AttributeValue]:
    """The span's attributes as the wire takes them (``wire.Attrs``: at most
    ``MAX_ATTRIBUTES``, keys and text cut to the limits, other values as text), plus its id,
    trace id and kind, its name when it was not interned as a method name, the type and message
    of its recorded exception and its status description."""
    found: dict[str, AttributeValue] = {}
    limit = wire.MAX_ATTRIBUTES - _EXTRA
    for key, value in (span.attributes or {}).items():
        if len(found) >= limit:
            break
        found[str(key)[: wire.MAX_NAME]] = _value(value)
    own = span.get_span_context()
    if own is not None:
        found[SPAN_ID] = f"{own.span_id:016x}"
        found[TRACE_ID] = f"{own.trace_id:032x}"
    found[SPAN_KIND] = span.kind.name
    if _scope_and_name(span) not in _methods:  # interned as OTHER_SPANS: keep its own name
        found[SPAN_NAME] = _value(span.name)
    exception = _exception(span)
    for key in ("exception.type", "exception.message"):
        if key in exception:
            found[key] = _value(exception[key])
    if span.status.description:
        found[STATUS_DESCRIPTION] = _value(span.status.description)
    return found


def _value(value: object) -> AttributeValue:
    if isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if -_I64 <= value < _I64 else str(value)
    if isinstance(value, str):
        text = value
    elif isinstance(value, list | tuple):
        text = msgspec.json.encode([_value(item) for item in value]).decode()
    else:
        text = str(value)
    return text[: wire.MAX_ATTRIBUTE_VALUE]


def _exception(span: ReadableSpan) -> Mapping[str, object]:
    """The attributes of the span's last recorded exception event, or nothing."""
    for event in reversed(span.events):
        if event.name == "exception" and event.attributes:
            return event.attributes
    return {}


def _error_name(span: ReadableSpan) -> str:
    recorded = _exception(span).get("exception.type")
    if isinstance(recorded, str) and recorded:
        return recorded.rpartition(".")[2][: wire.MAX_NAME]
    return STATUS_ERROR

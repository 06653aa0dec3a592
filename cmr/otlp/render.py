"""A sequence as OTLP/JSON traces (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding),
the file an OpenTelemetry Collector's ``otlpjsonfile`` receiver, Jaeger's and Tempo's importers, or
a plain ``curl -H 'Content-Type: application/json' --data @file URL/v1/traces`` take.

The document is a ``TracesData`` (the same shape as an ``ExportTraceServiceRequest``): one
``resourceSpans`` entry per process, one ``scopeSpans`` (scope ``invoseq``) in each. The spans
are ``cmr.otlp.spans``'s, encoded by OTLP's JSON rules, which differ from protobuf's canonical
JSON mapping: trace and span ids are lowercase hex (not base64), enums are integers, 64-bit
integers (times, ``intValue``) are decimal strings, and keys are lowerCamelCase. ``flags`` says,
as OpenTelemetry's own exporter does, whether the parent is remote (another process).
"""

from __future__ import annotations

import math
from typing import Any, Final

import msgspec

from cmr.otlp.spans import (
    KIND_SERVER,
    SCOPE_NAME,
    Attributes,
    AttributeValue,
    Span,
    SpanEvent,
    Trace,
)

#: ``Span.SpanKind`` and ``Status.StatusCode`` values of opentelemetry/proto/trace/v1/trace.proto.
SPAN_KIND_INTERNAL: Final = 1
SPAN_KIND_SERVER: Final = 2
STATUS_CODE_UNSET: Final = 0
STATUS_CODE_ERROR: Final = 2
#: ``SpanFlags``: the parent's remoteness is known, and it is remote.
FLAG_HAS_IS_REMOTE: Final = 0x100
FLAG_IS_REMOTE: Final = 0x200

_encode = msgspec.json.Encoder().encode
#: Spans made into JSON objects and encoded a chunk at a time: a million spans' dicts never all
#: exist at once (they took most of the 7.9 GB an export of a million calls peaked at).
SPANS_PER_CHUNK: Final = 1024


def render_otlp(trace: Trace) -> bytes:
    """The OTLP/JSON ``TracesData`` document of ``trace``, UTF-8: byte for byte what encoding the
    whole document at once gives (compact, keys in order), encoded a chunk of spans at a time."""
    trace_id = trace.trace_id.hex()
    scope = _encode({"name": SCOPE_NAME, "version": trace.scope_version})
    parts: list[bytes | memoryview] = [b'{"resourceSpans":[']
    for number, resource in enumerate(trace.resources):
        attributes = _encode(encode_attributes(resource.attributes))
        parts += [b"," if number else b"", b'{"resource":{"attributes":', attributes]
        parts += [b'},"scopeSpans":[{"scope":', scope, b',"spans":[']
        spans = resource.spans
        for first in range(0, len(spans), SPANS_PER_CHUNK):
            chunk = spans[first : first + SPANS_PER_CHUNK]
            encoded = _encode([_span(span, trace_id) for span in chunk])
            parts += [b"," if first else b"", memoryview(encoded)[1:-1]]  # the list's items
        parts.append(b"]}]}")
    parts.append(b"]}")
    return b"".join(parts)


def span_id_hex(span_id: int) -> str:
    return f"{span_id:016x}"


def _span(span: Span, trace_id: str) -> dict[str, Any]:
    encoded: dict[str, Any] = {"traceId": trace_id, "spanId": span_id_hex(span.span_id)}
    if span.parent_id:
        encoded["parentSpanId"] = span_id_hex(span.parent_id)
    encoded["flags"] = FLAG_HAS_IS_REMOTE | (FLAG_IS_REMOTE if span.parent_remote else 0)
    encoded["name"] = span.name
    encoded["kind"] = SPAN_KIND_SERVER if span.kind == KIND_SERVER else SPAN_KIND_INTERNAL
    encoded["startTimeUnixNano"] = str(span.start_ns)
    encoded["endTimeUnixNano"] = str(span.end_ns)
    encoded["attributes"] = encode_attributes(span.attributes)
    if span.events:
        encoded["events"] = [_event(event) for event in span.events]
    encoded["status"] = (
        {"code": STATUS_CODE_UNSET}
        if span.error is None
        else {"code": STATUS_CODE_ERROR, "message": span.error}
    )
    return encoded


def _event(event: SpanEvent) -> dict[str, Any]:
    return {
        "timeUnixNano": str(event.time_ns),
        "name": event.name,
        "attributes": encode_attributes(event.attributes),
    }


def encode_attributes(attributes: Attributes) -> list[dict[str, Any]]:
    """``KeyValue``s, in the attributes' order."""
    return [{"key": key, "value": _any_value(value)} for key, value in attributes.items()]


def _any_value(value: AttributeValue) -> dict[str, Any]:
    if isinstance(value, bool):  # before int: a bool is an int too
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": _double(value)}
    if isinstance(value, tuple):
        return {"arrayValue": {"values": [_any_value(item) for item in value]}}
    return {"stringValue": value}


def _double(value: float) -> float | str:
    """JSON has no NaN or infinities; protobuf's JSON mapping spells them as strings."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value

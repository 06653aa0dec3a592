"""Push sequences to an OTLP/HTTP receiver (an OpenTelemetry Collector, Jaeger, Tempo) through
OpenTelemetry's own exporter, ``opentelemetry-exporter-otlp-proto-http``.

The spans are ``cmr.otlp.spans``'s, the same as ``cmr export --format otlp`` writes, handed to the
exporter as SDK ``ReadableSpan``s: it encodes them as protobuf and POSTs them, retrying what OTLP
calls retryable (503, 429, a dropped connection) until its timeout. Spans go in batches of at
most ``batch_size``, sequence after sequence, and the first batch the receiver does not take ends
the run: a receiver that is down does not become a slow failure per sequence.

The exporter reports failures by logging them; those records are caught here, kept from the
terminal, and the last one becomes the one-line reason of a ForwardError.
"""

from __future__ import annotations

import logging
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from cmr.otlp.profiles import to_profiles
from cmr.otlp.spans import KIND_SERVER, SCOPE_NAME, Trace, to_trace
from cmr.store.base import Store
from cmr.views.pipeline import sequence_tree
from cmr.views.tree.hops import fold_empty_hops

#: The OTLP/HTTP path of traces, added to an endpoint given without a path.
TRACES_PATH: Final = "/v1/traces"
DEFAULT_BATCH_SIZE: Final = 512
DEFAULT_TIMEOUT_S: Final = 10.0
#: The loggers OpenTelemetry's OTLP exporters report through.
EXPORTER_LOGGER: Final = "opentelemetry.exporter.otlp"

Send = Callable[[Sequence[ReadableSpan]], None]


class ForwardError(Exception):
    """The receiver could not be reached or refused spans (a one-line reason)."""


@dataclass(frozen=True, slots=True)
class ForwardResult:
    sequences: int
    spans: int
    requests: int
    profiles: int = 0  # sequences whose samples went as profiles (``--profiles``)


def traces_url(endpoint: str) -> str:
    """The URL spans are POSTed to: ``endpoint`` itself when it has a path, else the endpoint
    with ``/v1/traces`` (so ``http://collector:4318`` works as people write it)."""
    parts = urllib.parse.urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ForwardError(f"expected an http:// or https:// URL, got '{endpoint}'")
    try:
        parts.port  # noqa: B018  (a bad port raises on access)
    except ValueError:
        raise ForwardError(f"bad port in '{endpoint}'") from None
    if parts.path in ("", "/"):
        parts = parts._replace(path=TRACES_PATH)
    return urllib.parse.urlunsplit(parts)


def check_reachable(url: str, timeout_s: float) -> None:
    """Fail fast, with the reason, when nothing answers at the URL's host and port: the exporter
    would retry a refused connection with backoff until its timeout, and log the reason away.
    Skipped when a proxy stands between (the proxy is what would answer)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if urllib.request.getproxies().get(parts.scheme) and not urllib.request.proxy_bypass(host):
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except TimeoutError:
        raise ForwardError(f"cannot reach {url}: no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise ForwardError(f"cannot reach {url}: {exc.strerror or exc}") from None


def sdk_spans(trace: Trace) -> list[ReadableSpan]:
    """The trace's spans as the SDK's exporters take them."""
    trace_id = int.from_bytes(trace.trace_id, "big")
    flags = TraceFlags(TraceFlags.SAMPLED)
    scope = InstrumentationScope(SCOPE_NAME, trace.scope_version)
    spans: list[ReadableSpan] = []
    for resource in trace.resources:
        sdk_resource = Resource(dict(resource.attributes))
        for span in resource.spans:
            parent = (
                SpanContext(
                    trace_id, span.parent_id, is_remote=span.parent_remote, trace_flags=flags
                )
                if span.parent_id
                else None
            )
            spans.append(
                ReadableSpan(
                    name=span.name,
                    context=SpanContext(trace_id, span.span_id, is_remote=False, trace_flags=flags),
                    parent=parent,
                    resource=sdk_resource,
                    attributes=dict(span.attributes),
                    events=[
                        Event(event.name, dict(event.attributes), event.time_ns)
                        for event in span.events
                    ],
                    kind=SpanKind.SERVER if span.kind == KIND_SERVER else SpanKind.INTERNAL,
                    status=Status(StatusCode.UNSET)
                    if span.error is None
                    else Status(StatusCode.ERROR, span.error),
                    start_time=span.start_ns,
                    end_time=span.end_ns,
                    instrumentation_scope=scope,
                )
            )
    return spans


def forward(
    store: Store,
    seqs: Iterable[bytes],
    send: Send,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    send_profiles: Callable[[dict[str, Any]], None] | None = None,
) -> ForwardResult:
    """Send every sequence's spans (samples merged in as estimated spans) in batches of at most
    ``batch_size``. A sequence is loaded only when the previous one is on its way. With
    ``send_profiles``, each sequence's samples go too, as profiles linked to those spans (once
    its spans are sent: a backend resolves the links)."""
    sequences = spans = requests = profiles = 0
    pending: list[ReadableSpan] = []
    for seq in seqs:
        data = fold_empty_hops(store.load_sequence(seq))
        tree = sequence_tree(data)
        trace = to_trace(tree, data)
        pending.extend(sdk_spans(trace))
        sequences += 1
        while len(pending) >= batch_size:
            send(pending[:batch_size])
            del pending[:batch_size]
            spans += batch_size
            requests += 1
        document = to_profiles(tree, data, trace) if send_profiles is not None else None
        if document is not None and send_profiles is not None:
            if pending:  # the spans first
                send(pending)
                spans += len(pending)
                requests += 1
                pending = []
            send_profiles(document)
            profiles += 1
    if pending:
        send(pending)
        spans += len(pending)
        requests += 1
    return ForwardResult(sequences, spans, requests, profiles)


@contextmanager
def otlp_sender(
    url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, headers: dict[str, str] | None = None
) -> Iterator[Send]:
    """A ``send`` that POSTs a batch to ``url`` and raises ForwardError when it is not taken."""
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s, headers=headers)
    failures = _Failures()
    logger = logging.getLogger(EXPORTER_LOGGER)
    saved = logger.propagate
    logger.addHandler(failures)
    logger.propagate = False

    def send(batch: Sequence[ReadableSpan]) -> None:
        if exporter.export(batch) is not SpanExportResult.SUCCESS:
            raise ForwardError(f"{url} did not take the spans: {failures.reason()}")

    try:
        yield send
    finally:
        logger.removeHandler(failures)
        logger.propagate = saved
        exporter.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated


class _Failures(logging.Handler):
    """Keeps the exporter's log records; the most telling one is the reason a send failed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def reason(self) -> str:
        """The latest record naming an HTTP status or an error, on one line."""
        for record in reversed(self.records):
            args = record.args if isinstance(record.args, tuple) else ()
            if record.msg == _FAILED and len(args) == 3:
                _, status, why = args
                return f"HTTP {status} {why}" if status else _one_line(why)
            if record.msg == _TRANSIENT and args:
                return _one_line(args[0])
        if self.records:
            return _one_line(self.records[-1].getMessage())
        return "the exporter gave no reason"


#: The exporter's messages that carry a reason (opentelemetry-exporter-otlp-common's wording).
_FAILED: Final = "Failed to export %s batch code: %s, reason: %s"
_TRANSIENT: Final = "Transient error %s encountered while exporting %s batch, retrying in %.2fs."


def _one_line(value: object) -> str:
    return " ".join(str(value).split())

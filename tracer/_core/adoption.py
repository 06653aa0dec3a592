"""A root invocation joins the OpenTelemetry trace it starts in.

More in docs/architecture.md, "tracer/_core/adoption.py".
"""

from __future__ import annotations

from tracer._core import context, forking, ids, imports, recorder

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    import contextvars
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from typing import Any, Final

#: Spans recorded as invocations of this process: span id -> (trace id, seq, iid). Written by
#: ``tracer.otel.InvocationSpanProcessor`` (on_start adds, on_end removes); dict operations are
#: atomic under the GIL, so any thread may read it.
nodes: Final[dict[int, tuple[int, bytes, int]]] = {}

# A forked child's spans are its own: the parent's open ones end (and are recorded) in the parent.
forking.on_fork("adoption", in_child=nodes.clear)

#: Whether OpenTelemetry's API is loaded: until the program imports ``opentelemetry.trace`` no
#: span can be current, so a root adopts nothing and the C wrapper is not even asked to look.
loaded = False

#: (ContextVar, key): ``adopt()`` finds no span unless the key is in the mapping the ContextVar
#: holds. The C wrapper checks this itself and calls ``adopt`` only when it holds. None until
#: OpenTelemetry is loaded, or with a runtime context other than its default.
GUARD: tuple[contextvars.ContextVar[Any], object] | None = None

#: Called once OpenTelemetry is loaded (the decorator passes the guard on to the C wrapper).
on_loaded: list[Callable[[], None]] = []


def _default_guard(trace: ModuleType) -> tuple[contextvars.ContextVar[Any], object] | None:
    """OpenTelemetry's own ContextVar and span key, when its default runtime context is in use
    (read directly, they make the no-span case cheap); None with any other runtime context."""
    try:
        from opentelemetry import context as otel_context
        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
        from opentelemetry.trace.propagation import _SPAN_KEY

        runtime = otel_context._RUNTIME_CONTEXT
        if isinstance(runtime, ContextVarsRuntimeContext):
            var: contextvars.ContextVar[Any] = runtime._current_context
            return var, _SPAN_KEY
    except (ImportError, AttributeError):  # a future API moved them: the public way still works
        pass
    return None


_Span: type[Any] | None = None
_current_otel_context: Callable[[], Mapping[object, object]] = dict
_span_key: object = None


def _otel_loaded(trace: ModuleType) -> None:
    """``opentelemetry.trace`` has been imported: from now on a root looks for a current span."""
    global loaded, GUARD, _Span, _current_otel_context, _span_key
    get_current_span = trace.get_current_span

    def public_context() -> Mapping[object, object]:
        return {None: get_current_span()}

    GUARD = _default_guard(trace)
    _Span = trace.Span
    _current_otel_context, _span_key = (
        (public_context, None) if GUARD is None else (GUARD[0].get, GUARD[1])
    )
    loaded = True
    for callback in on_loaded:
        callback()


imports.when_imported("opentelemetry.trace", _otel_loaded)


def from_span(span: object) -> context.Current | None:
    """The context value a root invocation under ``span`` runs with, or None for no span (or an
    invalid one)."""
    if _Span is None or not isinstance(span, _Span):
        return None
    span_context = span.get_span_context()
    if not span_context.is_valid:
        return None
    node = nodes.get(span_context.span_id)
    if node is not None and node[0] == span_context.trace_id:
        return (node[1], node[2], 0)
    return (span_context.trace_id.to_bytes(16, "big"), 0, ids.as_hid(span_context.span_id))


def adopt() -> context.Current | None:
    """The context value for a root invocation starting now: None (draw a new sequence) unless
    an OpenTelemetry span is current. Never raises: a failure is counted, and the root starts a
    sequence of its own."""
    if not loaded:
        return None
    try:
        span = _current_otel_context().get(_span_key)
        return None if span is None else from_span(span)
    except Exception as exc:
        recorder.internal_error(exc)
        return None

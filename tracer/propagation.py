"""W3C Trace Context across processes and services: the ``traceparent`` and ``tracestate`` headers.

More in docs/architecture.md, "tracer/propagation.py".
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import OrderedDict
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, TypeAlias, TypeVar, cast

from invoseq import events
from tracer._core import context, handoff, ids, stack
from tracer._tracecontext import (
    KNOWN_FLAGS,
    LARGE_ENTRY_CHARS,
    MAX_MEMBERS,
    MAX_TRACESTATE_CHARS,
    RANDOM,
    SAMPLED,
    Traceparent,
    fit_tracestate,
    format_traceparent,
    parse_traceparent,
    parse_tracestate,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context

CarrierT = TypeVar("CarrierT")
_C_contra = TypeVar("_C_contra", contravariant=True)


class Getter(Protocol[_C_contra]):
    """Reads a carrier: OpenTelemetry's ``Getter`` has this shape, so its getters fit too."""

    def get(self, carrier: _C_contra, key: str) -> list[str] | None: ...

    def keys(self, carrier: _C_contra) -> list[str]: ...


class Setter(Protocol[_C_contra]):
    """Writes a carrier: OpenTelemetry's ``Setter`` has this shape, so its setters fit too."""

    def set(self, carrier: _C_contra, key: str, value: str) -> None: ...


__all__ = [
    "ENVIRONMENT",
    "HEADERS",
    "LARGE_ENTRY_CHARS",
    "MAX_MEMBERS",
    "MAX_SEQUENCES",
    "MAX_TRACESTATE_CHARS",
    "RANDOM",
    "SAMPLED",
    "TRACEPARENT",
    "TRACESTATE",
    "EnvironmentCarrier",
    "HeaderCarrier",
    "InvoseqPropagator",  # noqa: F822 (made on first use, by __getattr__)
    "SequenceContext",
    "Traceparent",
    "continue_from",
    "continue_from_env",
    "continue_with",
    "extract",
    "extract_env",
    "format_traceparent",
    "from_otel_context",
    "inject",
    "inject_env",
    "parse_traceparent",
    "parse_tracestate",
]

#: What ``extract()`` returns and ``continue_from()`` attaches: (sequence id, parent invocation id,
#: hand-off id). Treat it as opaque: pass it on, compare it with None.
SequenceContext: TypeAlias = context.Current

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
VENDOR_KEY: Final = "invoseq"  # our tracestate entry: the puid of the process that injected
REMOTE_CALL: Final = "<remote call>"
SUBPROCESS: Final = "<subprocess>"
#: The flags of a sequence invoseq started: sampled (it records every call of a traced function)
#: and random: ``ids.new_seq`` draws the right-most 7 bytes uniformly at random (§3.2.2.5.2; the
#: bit that keeps an id from being all zero is left of them, ``ids.NONZERO_BIT``).
LOCAL_FLAGS: Final = SAMPLED | RANDOM
#: The side table's bound: the incoming context of this many sequences at most (each at most
#: ~2 KB, a tracestate being cut to 512 characters: under 10 MB in all).
MAX_SEQUENCES: Final = 4096

_get = context.current.get
_capture = stack.capture  # the exact current invocation (tracer._core.stack)
_set = context.set_current
_reset = context.reset_current


#: The hand-off id a parent-id stands for (defined in tracer._core.ids, where adoption finds it
#: too).
as_hid: Final = ids.as_hid


class HeaderCarrier:
    """HTTP-style carriers: a dict, ``http.client.HTTPMessage`` (``BaseHTTPRequestHandler.headers``)
    or any mapping of header names. Names match in any case (§3.2.1, §3.3.1); every field of a name
    counts, whether repeated items or a list value."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        items = getattr(carrier, "items", None)
        if not callable(items):
            return None
        found: list[str] = []
        for name, value in items():
            if isinstance(name, str) and name.lower() == key:
                if isinstance(value, str):
                    found.append(value)
                elif isinstance(value, list | tuple):
                    found.extend(v for v in value if isinstance(v, str))
        return found or None

    def keys(self, carrier: Any) -> list[str]:
        keys = getattr(carrier, "keys", None)
        return [k for k in keys() if isinstance(k, str)] if callable(keys) else []

    def set(self, carrier: Any, key: str, value: str) -> None:
        """Replace every field of that name, in any case: two traceparents make both invalid."""
        for name in dict.fromkeys(k for k in self.keys(carrier) if k.lower() == key):
            with contextlib.suppress(KeyError):
                del carrier[name]
        carrier[key] = value


class EnvironmentCarrier:
    """A process environment: ``TRACEPARENT`` and ``TRACESTATE``, names exact as variables are."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        value = carrier.get(key.upper())
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Any) -> list[str]:
        return list(carrier.keys())

    def set(self, carrier: Any, key: str, value: str) -> None:
        carrier[key.upper()] = value


HEADERS: Final = HeaderCarrier()
ENVIRONMENT: Final = EnvironmentCarrier()


class Incoming(NamedTuple):
    """What a sequence received besides its ids, sent on by every ``inject`` in it."""

    flags: int  # the incoming traceparent's known trace-flags (SAMPLED, RANDOM)
    members: tuple[str, ...]  # the other vendors' tracestate entries ("key=value"), in order


_LOCAL: Final = Incoming(LOCAL_FLAGS, ())

#: The side table: sequence id (= W3C trace-id) -> its incoming context, least recently used first.
#: Each operation on it is one C call, atomic under the GIL, so no lock (two threads at worst
#: evict one sequence too many). A forked child keeps a copy.
_incoming: Final[OrderedDict[bytes, Incoming]] = OrderedDict()


def _remember(seq: bytes, flags: int, tracestate: list[str] | None) -> None:
    """Keep what a valid traceparent brings for its sequence (the latest wins), the tracestate cut
    to what we send on; past ``MAX_SEQUENCES``, forget the least recently used sequence."""
    members = parse_tracestate(",".join(tracestate)) if tracestate else None
    kept = fit_tracestate([_ours(), *(f"{k}={v}" for k, v in members or () if k != VENDOR_KEY)])[1:]
    _incoming[seq] = Incoming(flags & KNOWN_FLAGS, tuple(kept))
    with contextlib.suppress(KeyError):  # another thread evicted it, or emptied the table
        _incoming.move_to_end(seq)
        while len(_incoming) > MAX_SEQUENCES:
            _incoming.popitem(last=False)


def _recall(seq: bytes) -> Incoming:
    """A sequence's incoming context: from the side table; else the current OpenTelemetry span's
    when the sequence is its trace (adopted: tracer._core.adoption); else a local sequence's."""
    found = _incoming.get(seq)
    if found is not None:
        with contextlib.suppress(KeyError):
            _incoming.move_to_end(seq)
        return found
    trace = sys.modules.get("opentelemetry.trace")  # not imported: no span can be current
    if trace is None:
        return _LOCAL
    span = trace.get_current_span().get_span_context()
    if span.is_valid and span.trace_id == int.from_bytes(seq, "big"):
        members = tuple(f"{k}={v}" for k, v in span.trace_state.items() if k != VENDOR_KEY)
        return Incoming(span.trace_flags & KNOWN_FLAGS, members)
    return _LOCAL


def _ours() -> str:
    return f"{VENDOR_KEY}={ids.identity().puid:x}"


def _tracestate(existing: list[str] | None, incoming: Incoming) -> str:
    """Our entry first (§3.5: a modified or added key moves to the left); then the entries of the
    outgoing carrier's own tracestate, if valid (another vendor in this process wrote them, after
    the sequence came in); then the sequence's incoming entries. A key stays where it first came."""
    carrier = parse_tracestate(",".join(existing)) if existing else None
    entries = {VENDOR_KEY: _ours()}
    for entry in [*(f"{k}={v}" for k, v in carrier or ()), *incoming.members]:
        entries.setdefault(entry.partition("=")[0], entry)
    return ",".join(fit_tracestate(list(entries.values())))


def _inject(
    carrier: Any,
    setter: Setter[Any],
    getter: Getter[Any],
    name: str,
    kind: str,
    *,
    current: SequenceContext | None = None,
) -> bool:
    """Record a hand-off from ``current`` (default: the current invocation) and write it."""
    if kind not in events.HANDOFF_KINDS:  # the repository would reject the whole batch
        raise ValueError(
            f"hand-off kind must be one of {', '.join(events.HANDOFF_KINDS)}: {kind!r}"
        )
    if current is None:
        current = _capture()
    if current is None or len(current[0]) != 16:
        return False
    value = handoff.record(kind, name, current)
    if value is None:
        return False
    seq, _, hid = value
    incoming = _recall(seq)
    existing = getter.get(carrier, TRACESTATE)
    setter.set(carrier, TRACEPARENT, format_traceparent(seq, hid, incoming.flags))
    setter.set(carrier, TRACESTATE, _tracestate(existing, incoming))
    return True


def _extract(carrier: Any, getter: Getter[Any]) -> SequenceContext | None:
    """The context value a valid traceparent gives (its flags and the tracestate go to the side
    table), or None: then the tracestate is not even parsed (§3.3)."""
    values = getter.get(carrier, TRACEPARENT)
    if not values or len(values) != 1:  # absent, or sent twice: not a list field
        return None
    parsed = parse_traceparent(values[0])
    if parsed is None:
        return None
    _remember(parsed.trace_id, parsed.flags, getter.get(carrier, TRACESTATE))
    return (parsed.trace_id, 0, as_hid(parsed.parent_id))


def inject(
    carrier: CarrierT,
    *,
    setter: Setter[CarrierT] | None = None,
    name: str = REMOTE_CALL,
    kind: events.HandoffKind = "remote",
) -> bool:
    """Write a fresh hand-off from the current invocation into ``carrier`` (outgoing headers).

    Every call records a new hand-off, named ``name`` (a stable name such as ``"GET /orders"``
    reads best, and is interned once). Returns False, leaving the carrier untouched, outside any
    sequence."""
    return _inject(carrier, HEADERS if setter is None else setter, HEADERS, name, kind)


def inject_from(
    carrier: Any, current: SequenceContext, *, name: str, setter: Setter[Any] | None = None
) -> bool:
    """``inject`` a remote hand-off from the invocation ``current`` names rather than the
    current one (an integration's measured call, whose value it holds: a traced coroutine
    resumed around it may be what the stack says is current)."""
    return _inject(
        carrier, HEADERS if setter is None else setter, HEADERS, name, "remote", current=current
    )


def extract(carrier: CarrierT, *, getter: Getter[CarrierT] | None = None) -> SequenceContext | None:
    """The context value ``(seq, 0, hid)`` that incoming headers continue, or None when they carry
    no valid traceparent."""
    return _extract(carrier, HEADERS if getter is None else getter)


@contextlib.contextmanager
def continue_with(value: SequenceContext | None) -> Iterator[SequenceContext | None]:
    """Attach ``value`` for the block (nothing when it is None) and restore what was there."""
    if value is None:
        yield None
        return
    token = _set(value)
    try:
        yield value
    finally:
        _reset(token)


def continue_from(
    carrier: CarrierT, *, getter: Getter[CarrierT] | None = None
) -> contextlib.AbstractContextManager[SequenceContext | None]:
    """Traced calls inside the block continue the sequence the incoming headers carry; with no
    valid traceparent nothing is attached, and they start a new sequence (outside any). Yields the
    extracted value or None."""
    return continue_with(extract(carrier, getter=getter))


def inject_env(
    env: MutableMapping[str, str], *, name: str = SUBPROCESS, kind: events.HandoffKind = "process"
) -> bool:
    """Write a fresh hand-off into a child process's environment (``TRACEPARENT``/``TRACESTATE``):
    ``env = dict(os.environ); inject_env(env); subprocess.run(..., env=env)``."""
    return _inject(env, ENVIRONMENT, ENVIRONMENT, name, kind)


def extract_env(env: Mapping[str, str] | None = None) -> SequenceContext | None:
    """The context value this process's environment (or ``env``) carries, or None."""
    return _extract(os.environ if env is None else env, ENVIRONMENT)


def continue_from_env(
    env: Mapping[str, str] | None = None,
) -> contextlib.AbstractContextManager[SequenceContext | None]:
    """``continue_from`` for a process started with ``inject_env``."""
    return continue_with(extract_env(env))


_otel_key: Any = None  # the OpenTelemetry Context key of the value ``InvoseqPropagator`` extracts


def _key() -> Any:
    global _otel_key
    if _otel_key is None:
        from opentelemetry import context as otel_context

        _otel_key = otel_context.create_key("invoseq-current")
    return _otel_key


def _propagator_class() -> type[Any]:
    """``InvoseqPropagator``, made on first use: importing ``tracer`` loads no OpenTelemetry."""
    from opentelemetry import context as otel_context
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import (
        TextMapPropagator,
        default_getter,
        default_setter,
    )

    class InvoseqPropagator(TextMapPropagator):
        """The same headers through OpenTelemetry's propagator API, for its global or composite
        propagators. ``extract`` stores the value in the returned OpenTelemetry Context (read it
        back with ``from_otel_context``); ``inject`` hands off from the current traced
        invocation, or else from a value extracted into the OpenTelemetry context (a service
        that only passes requests on).

        With OpenTelemetry's default getter and setter (plain dicts), header names match in any
        case and a header is replaced in any case, as with ``extract`` and ``inject``."""

        def extract(
            self,
            carrier: Any,
            context: Context | None = None,
            getter: Any = default_getter,
        ) -> Context:
            if context is None:
                context = Context()
            value = _extract(carrier, HEADERS if getter is default_getter else getter)
            return context if value is None else otel_context.set_value(_key(), value, context)

        def inject(
            self,
            carrier: Any,
            context: Context | None = None,
            setter: Any = default_setter,
        ) -> None:
            current = _capture()
            if current is None:
                current = from_otel_context(context)
            if setter is default_setter:
                setter = HEADERS
            _inject(carrier, setter, HEADERS, REMOTE_CALL, "remote", current=current)

        @property
        def fields(self) -> set[str]:
            return {TRACEPARENT, TRACESTATE}

    InvoseqPropagator.__module__ = __name__
    return InvoseqPropagator


_lazy: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """``InvoseqPropagator``, made (and OpenTelemetry imported) when first asked for."""
    if name != "InvoseqPropagator":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _lazy:
        _lazy[name] = _propagator_class()
    return _lazy[name]


def from_otel_context(otel: Context | None = None) -> SequenceContext | None:
    """The value ``InvoseqPropagator.extract`` stored in an OpenTelemetry Context (default: the
    current one); attach it with ``continue_with``."""
    from opentelemetry import context as otel_context

    value = otel_context.get_value(_key(), otel)
    return cast(context.Current, value) if isinstance(value, tuple) else None

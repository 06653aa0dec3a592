"""W3C Trace Context across processes and services: the ``traceparent`` and ``tracestate`` headers.

A hop to another process is a hand-off like any other. ``inject`` records a Handoff from the
current invocation and writes it into the outgoing carrier::

    traceparent: 00-<sequence: 32 hex>-<hand-off id: 16 hex>-01
    tracestate:  invoseq=<sending process's puid, hex>,<the other vendors' entries>

``extract`` on the receiving side returns the context value ``(seq, 0, hid)`` and
``continue_from`` attaches it for a block: the first traced call there carries the hid, and the
repository hangs it under the injecting invocation, whichever process that ran in. A traceparent
written by another tracing system joins its trace-id as the sequence, under a parent the repository
does not know.

Parsing follows W3C Trace Context Level 2 (https://www.w3.org/TR/trace-context-2/, sections cited
as §) and never raises: an invalid traceparent is ignored, so the next traced call starts a new
sequence; an invalid tracestate is discarded and never affects the traceparent (§3.3).

One implementation serves three carriers: HTTP-style headers (names in any case), a child
process's environment (``TRACEPARENT``/``TRACESTATE``, OpenTelemetry's convention for environment
carriers), and OpenTelemetry's propagator API (``InvoseqPropagator``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Final, NamedTuple, TypeAlias, cast

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import (
    CarrierT,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)

from tracer import wire
from tracer._core import context, handoff, ids

__all__ = [
    "ENVIRONMENT",
    "HEADERS",
    "TRACEPARENT",
    "TRACESTATE",
    "EnvironmentCarrier",
    "HeaderCarrier",
    "InvoseqPropagator",
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
MAX_MEMBERS: Final = 32  # §3.3.2: at most 32 list-members
MAX_TRACESTATE_CHARS: Final = 512  # what we send at most (§3.3.3.1: propagate at least 512)
LARGE_ENTRY_CHARS: Final = 128  # §3.3.3.1: entries longer than this are dropped first

_OWS: Final = " \t"  # RFC 9110 §5.6.3: optional whitespace is spaces and horizontal tabs

# §3.2.2: version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex only (HEXDIGLC).
# §3.2.4: a higher version may append fields, each introduced by "-".
_TRACEPARENT: Final = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL
)
# §3.3.2.2.1: key = ( lcalpha / DIGIT ) 0*255 ( keychar ); "@" may appear anywhere after the first
# character (Level 2; the Level 1 REC split it into tenant-id "@" system-id).
_KEY: Final = re.compile(r"[a-z0-9][a-z0-9_\-*/@]{0,255}")
# §3.3.2.2.2: value = 0*255(chr) nblk-chr: printable ASCII except "," and "=", no trailing space.
_VALUE: Final = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")

_get = context.current.get
_set = context.current.set
_reset = context.current.reset


class Traceparent(NamedTuple):
    version: int
    trace_id: bytes  # 16 bytes, never all zero
    parent_id: int  # as sent: 64 bits, never 0
    flags: int


def parse_traceparent(value: object) -> Traceparent | None:
    """The fields of a ``traceparent`` value, or None when the spec says to ignore it."""
    if not isinstance(value, str):
        return None
    # An HTTP field value excludes surrounding whitespace (RFC 9110 §5.5); the W3C test suite
    # (test_traceparent_ows_handling) expects a traceparent with leading or trailing OWS to hold.
    match = _TRACEPARENT.fullmatch(value.strip(_OWS))
    if match is None:
        return None
    version, trace_id, parent_id, flags, more = match.groups()
    if version == "ff":  # §3.2.2.1: version ff is invalid
        return None
    if version == "00" and more is not None:  # §3.2.2.2: version 00 has exactly four fields
        return None
    trace, parent = int(trace_id, 16), int(parent_id, 16)
    if not trace or not parent:  # §3.2.2.3, §3.2.2.4: all zeroes is invalid
        return None
    return Traceparent(int(version, 16), bytes.fromhex(trace_id), parent, int(flags, 16))


def parse_tracestate(value: object) -> list[tuple[str, str]] | None:
    """The list-members of a ``tracestate`` value in order, or None when it is invalid as a whole.

    Empty and whitespace-only members are allowed and skipped; they do not count towards the 32
    members (§3.3.2: they arise from combining several tracestate fields)."""
    if not isinstance(value, str):
        return None
    members: dict[str, str] = {}
    for raw in value.split(","):
        member = raw.strip(_OWS)  # §3.3.2: whitespace surrounding list-members is ignored
        if not member:
            continue
        key, equals, entry = member.partition("=")
        if not equals or not _KEY.fullmatch(key) or not _VALUE.fullmatch(entry):
            return None
        if key in members:  # §3.3.3: only one entry per key is allowed
            return None
        members[key] = entry
        if len(members) > MAX_MEMBERS:
            return None
    return list(members.items())


#: The hand-off id a parent-id stands for (defined in tracer._core.ids, where adoption finds it
#: too).
as_hid: Final = ids.as_hid


def format_traceparent(seq: bytes, hid: int) -> str:
    return f"00-{seq.hex()}-{hid:016x}-01"


class HeaderCarrier(Getter[Any], Setter[Any]):
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


class EnvironmentCarrier(Getter[Any], Setter[Any]):
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


def _tracestate(existing: list[str] | None) -> str:
    """Our entry first (§3.5: a modified or added key moves to the left), then the other vendors'
    entries as received, if they were valid; at most 32 members and 512 characters, dropping whole
    entries: those over 128 characters first, then from the right (§3.3.3.1)."""
    others = parse_tracestate(",".join(existing)) if existing else None
    entries = [f"{VENDOR_KEY}={ids.identity().puid:x}"]
    entries += [f"{key}={value}" for key, value in others or () if key != VENDOR_KEY]
    del entries[MAX_MEMBERS:]
    while len(",".join(entries)) > MAX_TRACESTATE_CHARS and len(entries) > 1:
        large = [i for i, entry in enumerate(entries) if i and len(entry) > LARGE_ENTRY_CHARS]
        del entries[large[-1] if large else -1]
    return ",".join(entries)


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
    if kind not in wire.HANDOFF_KINDS:  # the repository would reject the whole batch
        raise ValueError(f"hand-off kind must be one of {', '.join(wire.HANDOFF_KINDS)}: {kind!r}")
    if current is None:
        current = _get()
    if current is None or len(current[0]) != 16:
        return False
    value = handoff.record(kind, name, current)
    if value is None:
        return False
    seq, _, hid = value
    existing = getter.get(carrier, TRACESTATE)
    setter.set(carrier, TRACEPARENT, format_traceparent(seq, hid))
    setter.set(carrier, TRACESTATE, _tracestate(existing))
    return True


def _extract(carrier: Any, getter: Getter[Any]) -> SequenceContext | None:
    values = getter.get(carrier, TRACEPARENT)
    if not values or len(values) != 1:  # absent, or sent twice: not a list field
        return None
    parsed = parse_traceparent(values[0])
    if parsed is None:
        return None
    return (parsed.trace_id, 0, as_hid(parsed.parent_id))


def inject(
    carrier: CarrierT,
    *,
    setter: Setter[CarrierT] | None = None,
    name: str = REMOTE_CALL,
    kind: wire.HandoffKind = "remote",
) -> bool:
    """Write a fresh hand-off from the current invocation into ``carrier`` (outgoing headers).

    Every call records a new hand-off, named ``name`` (a stable name such as ``"GET /orders"``
    reads best, and is interned once). Returns False, leaving the carrier untouched, outside any
    sequence."""
    return _inject(carrier, HEADERS if setter is None else setter, HEADERS, name, kind)


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
    env: MutableMapping[str, str], *, name: str = SUBPROCESS, kind: wire.HandoffKind = "process"
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


_OTEL_KEY: Final = otel_context.create_key("invoseq-current")


class InvoseqPropagator(TextMapPropagator):
    """The same headers through OpenTelemetry's propagator API, for its global or composite
    propagators. ``extract`` stores the value in the returned OpenTelemetry Context (read it back
    with ``from_otel_context``); ``inject`` hands off from the current traced invocation, or else
    from a value extracted into the OpenTelemetry context (a service that only passes requests on).

    With OpenTelemetry's default getter and setter (plain dicts), header names match in any case
    and a header is replaced in any case, as with ``extract`` and ``inject``."""

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> Context:
        if context is None:
            context = Context()
        value = _extract(carrier, HEADERS if getter is default_getter else getter)
        return context if value is None else otel_context.set_value(_OTEL_KEY, value, context)

    def inject(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        setter: Setter[CarrierT] = default_setter,
    ) -> None:
        current = _get()
        if current is None:
            current = from_otel_context(context)
        if setter is default_setter:
            setter = HEADERS
        _inject(carrier, setter, HEADERS, REMOTE_CALL, "remote", current=current)

    @property
    def fields(self) -> set[str]:
        return {TRACEPARENT, TRACESTATE}


def from_otel_context(otel: Context | None = None) -> SequenceContext | None:
    """The value ``InvoseqPropagator.extract`` stored in an OpenTelemetry Context (default: the
    current one); attach it with ``continue_with``."""
    value = otel_context.get_value(_OTEL_KEY, otel)
    return cast(context.Current, value) if isinstance(value, tuple) else None

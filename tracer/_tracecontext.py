"""The grammar of W3C Trace Context's two headers: read and write ``traceparent`` and
``tracestate`` values, and cut a tracestate to its limits. No state and no ids of ours:
``tracer.propagation`` decides what goes in them (and re-exports the public names).

More in docs/architecture.md, "tracer/_tracecontext.py".
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

__all__ = [
    "KNOWN_FLAGS",
    "LARGE_ENTRY_CHARS",
    "MAX_MEMBERS",
    "MAX_TRACESTATE_CHARS",
    "RANDOM",
    "SAMPLED",
    "Traceparent",
    "fit_tracestate",
    "format_traceparent",
    "parse_traceparent",
    "parse_tracestate",
]

SAMPLED: Final = 0x01  # §3.2.2.5.1 trace-flags: the caller may have recorded trace data
RANDOM: Final = 0x02  # §3.2.2.5.2: the right-most 7 bytes of the trace-id are uniformly random
KNOWN_FLAGS: Final = SAMPLED | RANDOM  # §3.2.2.5.3: the other bits are reserved, sent as zero

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


class Traceparent(NamedTuple):
    version: int
    trace_id: bytes  # 16 bytes, never all zero
    parent_id: int  # as sent: 64 bits, never 0
    flags: int  # as sent: all 8 bits


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
    members (§3.3.2: they arise from combining several tracestate fields). A key present twice
    keeps its first (left-most, most recent) member: one entry per key is allowed (§3.3.3) and
    adding one must not repeat a key (§3.5), but a receiver need not clean up a duplicate another
    participant wrote, and does not discard the header for it (the official test suite's
    ``test_tracestate_duplicated_keys`` expects it inherited, one or both members kept)."""
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
        if key in members:  # a later duplicate: the first one stands
            continue
        members[key] = entry
        if len(members) > MAX_MEMBERS:
            return None
    return list(members.items())


def format_traceparent(seq: bytes, hid: int, flags: int = SAMPLED) -> str:
    """A version 00 ``traceparent`` (§3.2.4: the highest version we know): the sequence as
    trace-id, the hand-off id as parent-id, and of ``flags`` only the bits §3.2.2.5 defines."""
    return f"00-{seq.hex()}-{hid:016x}-{flags & KNOWN_FLAGS:02x}"


def fit_tracestate(entries: list[str]) -> list[str]:
    """``entries`` ("key=value", ours first) cut in place to at most 32 members and 512
    characters: whole entries go, never the first; those over 128 characters first, then from
    the right (§3.3.3.1)."""
    del entries[MAX_MEMBERS:]
    while len(",".join(entries)) > MAX_TRACESTATE_CHARS and len(entries) > 1:
        large = [i for i, entry in enumerate(entries) if i and len(entry) > LARGE_ENTRY_CHARS]
        del entries[large[-1] if large else -1]
    return entries

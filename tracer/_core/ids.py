"""Identity of the platform, the process and the sequence (see DESIGN.md, "Identity").

More in docs/architecture.md, "tracer/_core/ids.py".
"""

from __future__ import annotations

import _random
import _thread
import os
import sys
import time
from collections import namedtuple

from tracer._core import forking

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final, NamedTuple

_MACHINE_ID_FILES: Final = ("/etc/machine-id", "/var/lib/dbus/machine-id")


def _seed() -> int:
    """256 bits from the OS (``_random.Random.seed`` takes an int whole; other types it hashes)."""
    return int.from_bytes(os.urandom(32), "big")


_rng = _random.Random(_seed())
_time = time.time


def _reseed() -> None:
    _rng.seed(_seed())


#: The bit ``new_seq`` sets so that an id is never all zero: the lowest of the 9th byte, left of
#: the right-most 7 bytes, which stay uniformly random as W3C Trace Context Level 2 asks of a
#: trace-id sent with the ``random`` flag (§3.2.2.5.2).
NONZERO_BIT: Final = 1 << 56


#: The bits of a sequence id left of its random ones: the second it was drawn, modulo 65,536
#: (18.2 hours). A repository indexes sequences by id; ids drawn in the same second share their
#: first two bytes, so new ones land at a few places of that index, not all over it (issue 33,
#: goal 6: a repository that had grown to a million sequences stored a third fewer a second).
SECOND_BITS: Final = 16
_RANDOM_BITS: Final = 128 - SECOND_BITS


_second_from = _second_until = 0.0
#: The current second's bits of an id, and NONZERO_BIT (which a thread that reads them while
#: another makes the next second's still finds).
_second_bits = NONZERO_BIT


def new_seq() -> bytes:
    """A 128-bit sequence id: a valid W3C trace-id (never all zero; its right-most 7 bytes
    uniformly random), its first two bytes the wall clock's second modulo 65,536, the other
    112 bits random. The second's bits are made once a second (a clock set back too)."""
    global _second_from, _second_until, _second_bits
    now = _time()
    if not _second_from <= now < _second_until:
        second = int(now)
        _second_from, _second_until = float(second), second + 1.0
        _second_bits = ((second & 0xFFFF) << _RANDOM_BITS) | NONZERO_BIT
    return (_second_bits | _rng.getrandbits(_RANDOM_BITS)).to_bytes(16, "big")


def new_id63() -> int:
    """A random non-zero id that fits a signed 64-bit integer (stored as SQLite INTEGER)."""
    return _rng.getrandbits(63) or 1


_ID63: Final = 2**63 - 1


def as_hid(parent_id: int) -> int:
    """The hand-off id a W3C parent-id (a ``traceparent``'s, an OpenTelemetry span's) stands for.

    Ids are at most 2**63-1 in the repository (signed 64-bit database integers), so a parent-id we
    wrote always fits. A foreign one with the top bit set is masked to 63 bits (and never becomes
    0, which means "no hand-off"): no Handoff record has that hid anyway, so it is never matched,
    and it only has to be non-zero and stable."""
    return parent_id if parent_id <= _ID63 else (parent_id & _ID63) or _ID63


def host_name() -> str:
    import socket

    return socket.gethostname()


def platform_id() -> str:
    """A stable id of this host: a hash of its machine id, or of its host name when it has none."""
    import hashlib

    for path in _MACHINE_ID_FILES:
        try:
            with open(path, "rb") as file:
                machine = file.read().strip()
        except OSError:
            continue
        if machine:
            return hashlib.sha256(b"invoseq:" + machine).hexdigest()[:16]
    return hashlib.sha256(b"invoseq-host:" + host_name().encode()).hexdigest()[:16]


if TYPE_CHECKING:

    class ProcessIdentity(NamedTuple):
        """Who is sending: drawn at start, and again in a forked child."""

        puid: int
        pid: int
        host: str
        platform_id: str
        clock_offset_ns: int  # wall ns - monotonic ns: converts event times to wall time
        started_ns: int
        argv: tuple[str, ...]

else:  # the same, without typing's NamedTuple (typing is no part of ``import tracer``)
    ProcessIdentity = namedtuple(
        "ProcessIdentity",
        ("puid", "pid", "host", "platform_id", "clock_offset_ns", "started_ns", "argv"),
    )


def _draw_identity() -> ProcessIdentity:
    return ProcessIdentity(
        puid=new_id63(),
        pid=os.getpid(),
        host=host_name(),
        platform_id=platform_id(),
        clock_offset_ns=time.time_ns() - time.perf_counter_ns(),
        started_ns=_started_ns,
        argv=tuple(arg[:4096] for arg in sys.argv[:64]),
    )


_started_ns = time.time_ns()  # when the tracer was imported (or the process forked)
#: Drawn when first asked for (the sender's start), not at import: the host's name and machine
#: id are read then.
_identity: ProcessIdentity | None = None


_drawing = _thread.allocate_lock()  # two threads asking first get the same identity


def identity() -> ProcessIdentity:
    global _identity
    found = _identity
    if found is None:
        with _drawing:
            if _identity is None:
                _identity = _draw_identity()
            found = _identity
    return found


def adopt_argv(argv: Sequence[str]) -> None:
    """The command line of the program ``tracer run`` runs in this process: the identity was
    drawn when the tracer was imported, with the launcher's (``tracer run app.py``). Called
    before the sender starts, so that every batch names the program."""
    global _identity
    _identity = identity()._replace(argv=tuple(arg[:4096] for arg in argv[:64]))


def _after_fork_in_child() -> None:
    global _identity, _started_ns, _drawing
    _reseed()
    _drawing = _thread.allocate_lock()
    _started_ns = time.time_ns()
    _identity = None


forking.on_fork("ids", in_child=_after_fork_in_child)

"""The one age grammar of the whole repository side: ``--since 90m``, ``--older-than 7d``, the
``since`` of ``cmr ui``'s form. An age is a number and a unit (s, m, h, d, w); where a moment is
wanted, an ISO time is taken too. And the one duration grammar (``--min-duration``, the form's
``min_ms``): milliseconds, or a number and a unit (us, ms, s, m)."""

from __future__ import annotations

import math
import re
import time

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final

AGE_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
AGE_GRAMMAR: Final = "a number and a unit s, m, h, d or w (90m, 1.5h, 7d, 2w)"
_AGE: Final = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")


#: A duration with its unit, where a number alone means milliseconds (``cmr ls --min-duration``).
DURATION_UNITS: Final = {"us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000}
_DURATION: Final = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(us|ms|s|m)$")


def duration_ns(text: str) -> float | None:
    """A duration with its unit (``250us``, ``12ms``, ``1.5s``, ``2m``) in nanoseconds, not yet
    rounded (the caller bounds it: a number of hundreds of digits is infinite); None when
    ``text`` is not one."""
    match = _DURATION.match(text.strip())
    if match is None:
        return None
    return float(match.group(1)) * DURATION_UNITS[match.group(2)]


#: What ``milliseconds_ns`` takes.
MILLISECONDS_GRAMMAR: Final = "milliseconds or a number and a unit us, ms, s or m (250us, 1.5s)"
#: The longest duration a query may name: a repository's times are signed 64-bit nanoseconds.
LONGEST_NS: Final = 2**63 - 1


def milliseconds_ns(text: str) -> int:
    """Milliseconds, or a number and its unit (``250us``, ``1.5s``, ``2m``), in nanoseconds.
    Raises ValueError saying what was expected (the caller names the value given)."""
    ns = duration_ns(text)
    if ns is None:
        try:
            ns = float(text) * 1_000_000
        except ValueError:
            raise ValueError(f"expected {MILLISECONDS_GRAMMAR}") from None
    if not math.isfinite(ns) or ns < 0:
        raise ValueError("expected 0 or more milliseconds")
    if ns > LONGEST_NS:
        raise ValueError("expected at most 292 years")
    return round(ns)


def age_ns(text: str) -> int | None:
    """An age (``7d``) in nanoseconds; None when ``text`` is not one."""
    match = _AGE.match(text.strip())
    if match is None:
        return None
    return round(float(match.group(1)) * AGE_UNITS[match.group(2)] * 1e9)


def moment_ns(text: str, now_ns: int | None = None) -> int:
    """An age ago (``30m``: now minus 30 minutes) or an ISO time (a naive one is local time), as
    wall-clock nanoseconds. Raises ValueError saying what is expected."""
    ago = age_ns(text)
    if ago is not None:
        return (time.time_ns() if now_ns is None else now_ns) - ago
    import datetime  # with the first ISO time, not with every command line

    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"expected an age ({AGE_GRAMMAR}) or an ISO time, got '{text}'") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1_000

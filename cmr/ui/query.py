"""Which sequences the list of ``cmr ui`` shows: its query parameters, checked, and the selection.

The store lists the most recent sequences and finds those that called a method; the duration
and status filters are applied here, to at most the ``SCAN_WINDOW`` most recent sequences, so
a filter never walks a whole repository on a page load. A running sequence whose root has not
ended counts as lasting until now: it passes a minimum once it has run that long, and fails a
maximum once it has run longer. One that will never end (incomplete) has no duration: a
duration filter leaves it out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cmr.store.base import SequenceSummary, Store

#: The statuses a sequence can have (``SequenceSummary.status``), in the order the form offers.
RUNNING: Final = "running"
STATUSES: Final = (RUNNING, "complete", "incomplete")
#: Sequences listed when no ``limit`` is given, and the most a request may ask for.
DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 1000
#: How many of the most recent sequences a filtered list looks through, at most, and first.
SCAN_WINDOW: Final = 2000
FIRST_WINDOW: Final = 100
#: The longest method name accepted (a longer one is a mistake, not a name).
MAX_METHOD_LEN: Final = 1000

_PARAMETERS: Final = frozenset({"method", "min_ms", "max_ms", "status", "limit"})


class QueryError(ValueError):
    """A query parameter a user got wrong; the message says which and what is expected."""


@dataclass(frozen=True, slots=True)
class SequenceFilter:
    """What a list request asks for; empty fields filter nothing."""

    method: str = ""
    min_ns: int | None = None
    max_ns: int | None = None
    status: str = ""
    limit: int = DEFAULT_LIMIT

    @property
    def filters(self) -> bool:
        return (
            bool(self.method or self.status) or self.min_ns is not None or self.max_ns is not None
        )

    def matches(self, summary: SequenceSummary, now_ns: int) -> bool:
        """Duration and status (the method is the store's business)."""
        if self.status and summary.status != self.status:
            return False
        if self.min_ns is None and self.max_ns is None:
            return True
        duration_ns = lasted_ns(summary, now_ns)
        if duration_ns is None:
            return False
        if self.min_ns is not None and duration_ns < self.min_ns:
            return False
        return self.max_ns is None or duration_ns <= self.max_ns


def lasted_ns(summary: SequenceSummary, now_ns: int) -> int | None:
    """How long a sequence lasted: to its root's end, or until now while it runs; None for one
    that will never end (incomplete)."""
    if summary.end_ns is not None:
        return max(0, summary.end_ns - summary.start_ns)
    if summary.status == RUNNING:
        return max(0, now_ns - summary.start_ns)
    return None


def parse_filter(query: Mapping[str, Sequence[str]]) -> SequenceFilter:
    """The filter a query string (``urllib.parse.parse_qs(..., keep_blank_values=True)``) asks
    for. Blank values filter nothing, as an HTML form sends them. Raises QueryError."""
    unknown = sorted(set(query) - _PARAMETERS)
    if unknown:
        expected = ", ".join(sorted(_PARAMETERS))
        raise QueryError(f"unknown parameter '{_shown(unknown[0])}' (expected: {expected})")
    values = {name: _single(query, name) for name in _PARAMETERS}
    method = values["method"]
    if len(method) > MAX_METHOD_LEN:
        raise QueryError(f"method: at most {MAX_METHOD_LEN} characters")
    status = values["status"]
    if status and status not in STATUSES:
        raise QueryError(f"status: expected one of {', '.join(STATUSES)}, got '{_shown(status)}'")
    min_ns = _milliseconds("min_ms", values["min_ms"])
    max_ns = _milliseconds("max_ms", values["max_ms"])
    if min_ns is not None and max_ns is not None and min_ns > max_ns:
        raise QueryError("min_ms is more than max_ms: nothing can match")
    return SequenceFilter(method, min_ns, max_ns, status, _limit(values["limit"]))


def select_sequences(store: Store, wanted: SequenceFilter, now_ns: int) -> list[SequenceSummary]:
    """The most recent sequences ``wanted`` selects, newest first, at most ``wanted.limit``.

    A store summarises each sequence it lists, which costs, so a filtered list reads a small
    window of the most recent sequences first and widens it (up to ``SCAN_WINDOW``) only while
    too few match: a filter most sequences pass costs about what an unfiltered list does."""
    if not wanted.filters:
        return store.list_sequences(wanted.limit)
    found: set[bytes] | None = None
    if wanted.method:
        found = set(store.find_sequences(wanted.method, since_ns=None, limit=SCAN_WINDOW))
        if not found:
            return []
    window = min(SCAN_WINDOW, max(FIRST_WINDOW, 2 * wanted.limit))
    while True:
        recent = store.list_sequences(window)
        candidates = recent if found is None else [s for s in recent if s.seq in found]
        selected = [summary for summary in candidates if wanted.matches(summary, now_ns)]
        if (
            len(selected) >= wanted.limit
            or len(recent) < window  # the whole repository was read
            or window == SCAN_WINDOW
            or (found is not None and len(candidates) == len(found))  # every caller was seen
        ):
            return selected[: wanted.limit]
        window = min(SCAN_WINDOW, window * 4)


def _single(query: Mapping[str, Sequence[str]], name: str) -> str:
    values = query.get(name, ())
    if len(values) > 1:
        raise QueryError(f"{name}: give it once")
    return values[0].strip() if values else ""


def _milliseconds(name: str, text: str) -> int | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise QueryError(f"{name}: expected milliseconds, got '{_shown(text)}'") from None
    if not math.isfinite(value) or value < 0:
        raise QueryError(f"{name}: expected 0 or more milliseconds, got '{_shown(text)}'")
    return round(value * 1_000_000)


def _limit(text: str) -> int:
    if not text:
        return DEFAULT_LIMIT
    try:
        value = int(text)
    except ValueError:
        raise QueryError(f"limit: expected a whole number, got '{_shown(text)}'") from None
    if not 1 <= value <= MAX_LIMIT:
        raise QueryError(f"limit: expected 1 to {MAX_LIMIT}, got {value}")
    return value


def _shown(text: str) -> str:
    """A user's value as an error message quotes it: short enough for one line."""
    return text if len(text) <= 40 else text[:40] + "…"

"""Which sequences the list of ``cmr ui`` shows: its query parameters, checked, and the selection.

The root pattern, durations, status, start window, host and order are ``cmr ls``'s (a
``SequenceQuery`` the store answers by index); the store also finds the sequences that called
a method, and a method filter looks through at most the ``SCAN_WINDOW`` lines the others
select. Unlike ``cmr ls``, a running sequence whose root has not ended counts as lasting until
now: it passes a minimum once it has run that long, and fails a maximum once it has run longer
(a page watches what runs). The store gives the ended ones; the running ones (few: those still
open) are asked for apart and checked here. One that will never end (incomplete) has no
duration: a duration filter leaves it out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlencode

from cmr.ages import milliseconds_ns, moment_ns
from cmr.store.base import (
    KIND_REQUEST,
    KINDS,
    SORT_DURATION,
    SORT_START,
    SequenceQuery,
    SequenceSummary,
    Store,
)
from cmr.store.listing import listed_status

#: The statuses the form offers (``listing.listed_status``: error is a root that raised).
RUNNING: Final = "running"
STATUSES: Final = (RUNNING, "complete", "incomplete", "error")
SORTS: Final = (SORT_START, SORT_DURATION)
#: Sequences listed when no ``limit`` is given, and the most a request may ask for.
DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 1000
#: How many of the most recent sequences a filtered list looks through, at most, and first.
SCAN_WINDOW: Final = 2000
FIRST_WINDOW: Final = 100
#: The longest method name accepted (a longer one is a mistake, not a name).
MAX_METHOD_LEN: Final = 1000

_PARAMETERS: Final = frozenset(
    {
        "method",
        "root",
        "min_ms",
        "max_ms",
        "status",
        "since",
        "until",
        "host",
        "sort",
        "limit",
        "kind",
    }
)
#: The longest root pattern or host name accepted.
MAX_TEXT_LEN: Final = 1000


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
    root: str = ""
    since: str = ""  # as typed: an age or an ISO time (cmr ls --since)
    until: str = ""
    host: str = ""
    sort: str = SORT_START
    kind: str = KIND_REQUEST  # as cmr ls --kind: a process's service sequences left out

    @property
    def filters(self) -> bool:
        return (
            bool(self.method or self.status or self.root or self.since or self.until or self.host)
            or self.min_ns is not None
            or self.max_ns is not None
            or self.sort != SORT_START
        )

    def query(self, now_ns: int) -> SequenceQuery:
        """What the store selects and orders (all but the method and the durations)."""
        return SequenceQuery(
            root=self.root or None,
            status=self.status or None,
            since_ns=moment_ns(self.since, now_ns) if self.since else None,
            until_ns=moment_ns(self.until, now_ns) if self.until else None,
            host=self.host or None,
            sort=self.sort,
            kind=self.kind,
        )

    def matches(self, summary: SequenceSummary, now_ns: int) -> bool:
        """Duration and status (the rest is the store's business)."""
        if self.status and listed_status(summary) != self.status:
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
    values = {name: single(query, name) for name in _PARAMETERS}
    method = values["method"]
    if len(method) > MAX_METHOD_LEN:
        raise QueryError(f"method: at most {MAX_METHOD_LEN} characters")
    for name in ("root", "host"):
        if len(values[name]) > MAX_TEXT_LEN:
            raise QueryError(f"{name}: at most {MAX_TEXT_LEN} characters")
    status = values["status"]
    if status and status not in STATUSES:
        raise QueryError(f"status: expected one of {', '.join(STATUSES)}, got '{_shown(status)}'")
    kind = values["kind"] or KIND_REQUEST
    if kind not in KINDS:
        raise QueryError(f"kind: expected one of {', '.join(KINDS)}, got '{_shown(kind)}'")
    sort = values["sort"] or SORT_START
    if sort not in SORTS:
        raise QueryError(f"sort: expected one of {', '.join(SORTS)}, got '{_shown(sort)}'")
    min_ns = _milliseconds("min_ms", values["min_ms"])
    max_ns = _milliseconds("max_ms", values["max_ms"])
    if min_ns is not None and max_ns is not None and min_ns > max_ns:
        raise QueryError("min_ms is more than max_ms: nothing can match")
    for name in ("since", "until"):
        if values[name]:
            try:
                moment_ns(values[name])
            except ValueError as exc:
                raise QueryError(f"{name}: {exc}") from None
    return SequenceFilter(
        method,
        min_ns,
        max_ns,
        status,
        _limit(values["limit"]),
        root=values["root"],
        since=values["since"],
        until=values["until"],
        host=values["host"],
        sort=sort,
        kind=kind,
    )


def select_sequences(store: Store, wanted: SequenceFilter, now_ns: int) -> list[SequenceSummary]:
    """The sequences ``wanted`` selects, newest (or longest) first, at most ``wanted.limit``."""
    if not wanted.filters:
        return store.list_sequences(wanted.limit, SequenceQuery(kind=wanted.kind))
    if wanted.method:
        return _calling_method(store, wanted, now_ns)
    query = wanted.query(now_ns)
    if wanted.min_ns is None and wanted.max_ns is None:
        return store.list_sequences(wanted.limit, query)
    timed = dataclasses.replace(query, min_duration_ns=wanted.min_ns, max_duration_ns=wanted.max_ns)
    ended = store.list_sequences(wanted.limit, timed)
    if query.status not in (None, RUNNING):
        return ended
    seen = {summary.seq for summary in ended}
    running = [
        summary
        for summary in store.list_sequences(SCAN_WINDOW, dataclasses.replace(query, status=RUNNING))
        if summary.end_ns is None and summary.seq not in seen and wanted.matches(summary, now_ns)
    ]
    if not running:
        return ended
    if wanted.sort == SORT_DURATION:
        order = sorted(ended + running, key=lambda s: (-(lasted_ns(s, now_ns) or 0), -s.start_ns))
    else:
        order = sorted(ended + running, key=lambda s: -s.start_ns)
    return order[: wanted.limit]


def _calling_method(store: Store, wanted: SequenceFilter, now_ns: int) -> list[SequenceSummary]:
    """The most recent sequences that called the method and pass the other filters: the store
    reads a small window of the most recent sequences first and widens it (up to
    ``SCAN_WINDOW``) only while too few match."""
    query = wanted.query(now_ns)
    found = set(store.find_sequences(wanted.method, since_ns=None, limit=SCAN_WINDOW))
    if not found:
        return []
    window = min(SCAN_WINDOW, max(FIRST_WINDOW, 2 * wanted.limit))
    while True:
        recent = store.list_sequences(window, query)
        candidates = [s for s in recent if s.seq in found]
        selected = [summary for summary in candidates if wanted.matches(summary, now_ns)]
        if (
            len(selected) >= wanted.limit
            or len(recent) < window  # the whole repository was read
            or window == SCAN_WINDOW
            or len(candidates) == len(found)  # every caller was seen
        ):
            return selected[: wanted.limit]
        window = min(SCAN_WINDOW, window * 4)


def single(query: Mapping[str, Sequence[str]], name: str) -> str:
    """A parameter given at most once, stripped (blank when absent). Raises QueryError."""
    values = query.get(name, ())
    if len(values) > 1:
        raise QueryError(f"{name}: give it once")
    return values[0].strip() if values else ""


def _milliseconds(name: str, text: str) -> int | None:
    """The form's ``min_ms`` or ``max_ms``: the command line's grammar (``cmr.ages``)."""
    if not text:
        return None
    try:
        return milliseconds_ns(text)
    except ValueError as exc:
        raise QueryError(f"{name}: {exc}, got '{_shown(text)}'") from None


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


def filter_query(wanted: SequenceFilter) -> str:
    """The query string that asks for ``wanted`` (its fields that filter, and a limit that is
    not the default): how the list page links to the map of what it lists."""
    fields = {
        "root": wanted.root,
        "method": wanted.method,
        "min_ms": ms_text(wanted.min_ns),
        "max_ms": ms_text(wanted.max_ns),
        "status": wanted.status,
        "since": wanted.since,
        "until": wanted.until,
        "host": wanted.host,
        "kind": "" if wanted.kind == KIND_REQUEST else wanted.kind,
        "limit": "" if wanted.limit == DEFAULT_LIMIT else str(wanted.limit),
    }
    return urlencode({name: value for name, value in fields.items() if value})


def ms_text(ns: int | None) -> str:
    """Milliseconds as a user would type them, without float noise (1.5, not 1.500000)."""
    return "" if ns is None else f"{ns / 1_000_000:.6f}".rstrip("0").rstrip(".")

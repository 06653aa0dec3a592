"""Listing by query (``Store.list_sequences(limit, query)``): the rules every store applies to
its listing lines, so they cannot drift.

A store reads, by index, the lines of the sequences that started in the query's window and ran
on its host, newest first, a page at a time (``Page``); ``select_lines`` keeps those whose root
name, duration and status the query wants, newest first until it has ``limit``, or the
``limit`` longest of the window. Without a query (or one only the index decides) it is one page
of ``limit`` lines: what ``cmr ls`` always read.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Final

from cmr.store._shared import COMPLETE
from cmr.store.base import SORT_DURATION, STATUS_ERROR, SequenceQuery, SequenceSummary

#: Listing lines a store reads at a time while a query passes over some.
PAGE_SIZE: Final = 256
_I64_MAX: Final = 2**63 - 1
#: Where a listing starts: before every (start_ns, seq) there is (a seq is 16 bytes).
FIRST_KEY: Final = (_I64_MAX, b"\xff" * 17)
#: A store's lines of the sequences that started in the query's window and ran on its host,
#: newest first, after ``key`` (a line's (start_ns, seq)), at most ``size``.
Page = Callable[[tuple[int, bytes], int], list[SequenceSummary]]


_I64_MIN: Final = -(2**63)


def window(query: SequenceQuery | None) -> dict[str, int | str | None]:
    """The query's window and host as a SQL store binds them (``since``, ``until``, ``host``)."""
    if query is None:
        return {"since": _I64_MIN, "until": _I64_MAX, "host": None}
    since = _I64_MIN if query.since_ns is None else query.since_ns
    until = _I64_MAX if query.until_ns is None else query.until_ns
    return {"since": since, "until": until, "host": query.host}


def select_lines(page: Page, limit: int, query: SequenceQuery | None) -> list[SequenceSummary]:
    """The lines ``list_sequences(limit, query)`` gives, read a page at a time: newest first
    until ``limit`` are wanted, or, sorted by duration, the ``limit`` longest of the window
    (holding no more than that many between pages)."""
    if limit == 0:
        return []
    if query is None or query.by_lines_only:
        return page(FIRST_KEY, limit)
    found: list[SequenceSummary] = []
    key = FIRST_KEY
    longest = query.sort == SORT_DURATION
    while True:
        lines = page(key, PAGE_SIZE)
        found += [line for line in lines if wanted(line, query)]
        if not longest and len(found) >= limit:
            return found[:limit]
        if longest and len(found) > limit:
            found = sorted(found, key=_longest_first)[:limit]
        if len(lines) < PAGE_SIZE:
            break
        key = (lines[-1].start_ns, lines[-1].seq)
    return sorted(found, key=_longest_first)[:limit] if longest else found


def wanted(line: SequenceSummary, query: SequenceQuery) -> bool:
    """Whether a line passes the query's root pattern, durations and status (the store has
    applied its window and host)."""
    if query.root is not None and not fnmatch.fnmatchcase(line.root, query.root):
        return False
    if query.min_duration_ns is not None or query.max_duration_ns is not None:
        duration = duration_of(line)
        if duration is None:
            return False
        if query.min_duration_ns is not None and duration < query.min_duration_ns:
            return False
        if query.max_duration_ns is not None and duration > query.max_duration_ns:
            return False
    return query.status is None or listed_status(line) == query.status


def duration_of(line: SequenceSummary) -> int | None:
    return None if line.end_ns is None else max(0, line.end_ns - line.start_ns)


def listed_status(line: SequenceSummary) -> str:
    """complete, running or incomplete; error for a complete sequence whose root raised."""
    if line.status == COMPLETE and line.error is not None:
        return STATUS_ERROR
    return line.status


def _longest_first(line: SequenceSummary) -> tuple[int, int, int, bytes]:
    """Longest first, sequences not ended last; then newest first."""
    duration = duration_of(line)
    return (duration is None, -(duration or 0), -line.start_ns, bytes(255 - b for b in line.seq))

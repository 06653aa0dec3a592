"""Listing by query (``Store.list_sequences(limit, query)``): the rules every store applies to
its listing lines, so they cannot drift.

A store reads, by index, a page at a time (``Page``), the lines of the sequences the query may
want: those that started in its window, ran on its host, and whose listing keys (root name,
duration, error, kept at ingest where the root is decided: ``listing_sql``) pass; newest first,
or longest first, and the undecided ones of the window apart. ``select_lines`` checks every
line against the whole query (``wanted``: the index picks candidates, the line has the last
word) and keeps them newest first until it has ``limit``, or the ``limit`` longest. Without a
query (or one only the window decides) it is one page of ``limit`` lines: what ``cmr ls``
always read.
"""

from __future__ import annotations

import fnmatch
from collections import namedtuple
from collections.abc import Callable

from cmr.store.base import (
    KIND_ALL,
    SORT_DURATION,
    STATUS_ERROR,
    SequenceQuery,
    SequenceSummary,
    kind_of,
    shown_status,
)
from cmr.store.rules import COMPLETE, INCOMPLETE, RUNNING

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final, NamedTuple

#: Listing lines a store reads at a time while a query passes over some.
PAGE_SIZE: Final = 256
_I64_MAX: Final = 2**63 - 1
_LAST_SEQ: Final = b"\xff" * 17  # after every seq (a seq is 16 bytes)
#: Where a listing starts: before every (start_ns, seq) there is.
FIRST_KEY: Final = (_I64_MAX, _LAST_SEQ)
#: Where a listing longest first starts: before every (duration, start_ns, seq).
FIRST_LONGEST_KEY: Final = (_I64_MAX, _I64_MAX, _LAST_SEQ)

#: The pages a store reads (``Page``): NEWEST, the candidate lines newest first after a key
#: (start_ns, seq); LONGEST, the candidates whose root is decided (``listing_sql``) and ended,
#: longest first after a key (duration, start_ns, seq); UNENDED, those decided and not ended,
#: newest first (they follow the longest); UNDECIDED, the candidates whose root is not, newest
#: first (their duration is the line's to say).
PageKind = str
NEWEST: Final = "newest"
LONGEST: Final = "longest"
UNDECIDED: Final = "undecided"
UNENDED: Final = "unended"
#: A page's key: (start_ns, seq), or (duration, start_ns, seq) for LONGEST.
PageKey = tuple[int, bytes] | tuple[int, int, bytes]
#: A store's page of ``kind`` after ``key``, at most ``size`` lines, in any order.
Page = Callable[[PageKind, PageKey, int], list[SequenceSummary]]


_I64_MIN: Final = -(2**63)
#: A pattern matching more names than this selects on the lines alone (a long IN list costs
#: more than the lines it would spare).
MAX_MATCHED_NAMES: Final = 256


def window(query: SequenceQuery | None) -> tuple[int, int]:
    """The query's start window [since, until], open ends made the widest there is."""
    if query is None:
        return _I64_MIN, _I64_MAX
    since = _I64_MIN if query.since_ns is None else query.since_ns
    until = _I64_MAX if query.until_ns is None else query.until_ns
    return since, until


if TYPE_CHECKING:

    class ListingKeys(NamedTuple):
        """What a sequence's own row says for a listing query (``listing_sql``): ``root_name``
        is set only when the root is decided (a true root with a known method), and then its
        line shows that name, ``end_ns`` and ``error``."""

        start_ns: int
        root_name: str | None
        end_ns: int | None
        error: str | None
        open: bool  # an invocation is still open

else:  # the same, without typing (a listing loads none)
    ListingKeys = namedtuple("ListingKeys", ("start_ns", "root_name", "end_ns", "error", "open"))


def candidate(
    kind: PageKind, query: SequenceQuery | None, names: list[str] | None, keys: ListingKeys
) -> bool:
    """Whether a page of ``kind`` holds the sequence: ``listing_sql.picked``'s conditions, for a
    store without SQL (window and host apart)."""
    if query is not None and not _open_as_asked(query.status, keys):
        return False
    if keys.root_name is None:
        return kind in {NEWEST, UNDECIDED}
    if kind == UNDECIDED or (kind == UNENDED and keys.end_ns is not None):
        return False
    duration = None if keys.end_ns is None else keys.end_ns - keys.start_ns
    if query is None:
        return kind != LONGEST or duration is not None
    checks = (
        query.root is None or names is None or keys.root_name in names,
        kind != LONGEST or duration is not None,
        query.min_duration_ns is None
        or (duration is not None and duration >= query.min_duration_ns),
        query.max_duration_ns is None
        or (duration is not None and duration <= query.max_duration_ns),
        query.status != STATUS_ERROR or keys.error is not None,
        query.status != COMPLETE or keys.error is None,
    )
    return all(checks)


def _open_as_asked(status: str | None, keys: ListingKeys) -> bool:
    """``listing_sql._open_test``: a sequence follows its root (``rules.sequence_status``),
    so a decided one is complete once its row has an end, and running or incomplete while it
    has none and an invocation is open; an undecided one's line decides, but it cannot be
    running or incomplete with nothing open."""
    decided = keys.root_name is not None
    if status in {COMPLETE, STATUS_ERROR}:
        return not decided or keys.end_ns is not None
    if status in {RUNNING, INCOMPLETE}:
        return keys.open and not (decided and keys.end_ns is not None)
    return True


def select_lines(page: Page, limit: int, query: SequenceQuery | None) -> list[SequenceSummary]:
    """The lines ``list_sequences(limit, query)`` gives, read a page at a time: newest first
    until ``limit`` are wanted, or, sorted by duration, the ``limit`` longest (the decided ones
    in the index's order, the undecided ones of the window beside them)."""
    if limit == 0:
        return []
    if query is None or query.by_lines_only:
        return sorted(page(NEWEST, FIRST_KEY, limit), key=_newest_key, reverse=True)
    if query.sort != SORT_DURATION:
        return _first_wanted(page, NEWEST, limit, query, _newest_key)
    found = _first_wanted(page, LONGEST, limit, query, _longest_key)
    if len(found) < limit:  # then those not ended, newest first
        found += _first_wanted(page, UNENDED, limit - len(found), query, _newest_key)
    undecided: list[SequenceSummary] = []
    key: tuple[int, bytes] = FIRST_KEY
    while True:  # every undecided line of the window: the line alone knows its duration
        lines = sorted(page(UNDECIDED, key, PAGE_SIZE), key=_newest_key, reverse=True)
        undecided += [line for line in lines if wanted(line, query)]
        if len(undecided) > limit:
            undecided = sorted(undecided, key=_longest_first)[:limit]
        if len(lines) < PAGE_SIZE:
            break
        key = _newest_key(lines[-1])
    return sorted(found + undecided, key=_longest_first)[:limit]


def _first_wanted(
    page: Page,
    kind: PageKind,
    limit: int,
    query: SequenceQuery,
    key_of: Callable[[SequenceSummary], PageKey],
) -> list[SequenceSummary]:
    """The first ``limit`` wanted lines of the pages of ``kind``, in the pages' order."""
    found: list[SequenceSummary] = []
    key: PageKey = FIRST_LONGEST_KEY if kind == LONGEST else FIRST_KEY
    size = min(PAGE_SIZE, limit)  # the index did most of the choosing: often one page will do
    while True:
        lines = sorted(page(kind, key, size), key=key_of, reverse=True)
        found += [line for line in lines if wanted(line, query)]
        if len(found) >= limit or len(lines) < size:
            return found[:limit]
        key = key_of(lines[-1])
        size = PAGE_SIZE


def _newest_key(line: SequenceSummary) -> tuple[int, bytes]:
    return (line.start_ns, line.seq)


def _longest_key(line: SequenceSummary) -> tuple[int, int, bytes]:
    """A decided line's key in ``sequences_by_duration`` (it has ended: end >= start)."""
    return (duration_of(line) or 0, line.start_ns, line.seq)


def matching_names(pattern: str | None, names: list[str], complete: bool) -> list[str] | None:
    """The root names ``pattern`` matches among ``names`` (every decided root name when
    ``complete``), for an index lookup; None when the lines alone are to decide (no pattern,
    names not all known, or too many matched to be worth an index)."""
    if pattern is None or not complete:
        return None
    matched = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
    return None if len(matched) > MAX_MATCHED_NAMES else matched


def wanted(line: SequenceSummary, query: SequenceQuery) -> bool:
    """Whether a line passes the query's root pattern, durations and status (the store has
    applied its window and host)."""
    if query.kind != KIND_ALL and kind_of(line.root) != query.kind:
        return False
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
    """complete, running or incomplete; error for a complete sequence whose root raised
    (``base.shown_status``)."""
    return shown_status(line.status, line.error)


def _longest_first(line: SequenceSummary) -> tuple[int, int, int, bytes]:
    """Longest first, sequences not ended last; then newest first."""
    duration = duration_of(line)
    return (duration is None, -(duration or 0), -line.start_ns, bytes(255 - b for b in line.seq))

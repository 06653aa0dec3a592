"""The SQL both SQL stores pick a listing page's sequences with (``cmr.store.listing``): each
field of a ``SequenceQuery`` that a sequence's own row can answer is answered by that row's
indexes, never by reading listing lines the query does not want.

A sequence's row keeps its listing keys (``root_name``, ``end_ns``, ``error``), set at ingest
when its root candidate is a true root whose method is known: such a row is *decided*, and its
keys are exactly what its listing line will show. Otherwise ``root_name`` is NULL (a sequence
rooted at a remote parent, or whose root was lost: its line's root and end depend on hand-offs
that may arrive later) and the line decides. A page is then two index reads merged in order:
the decided rows the query's keys select (the root names its pattern matches, by
``sequences_by_root``; the duration, by ``sequences_by_duration``; errors, by
``sequences_failed``; the window, by ``sequences_by_start``) and the undecided rows of the
window. A sequence's status follows its root: a decided row is complete once it has an end (a
column of its own), and those still running (or incomplete) are read from ``open_calls``.
The start, root and duration indexes hold no single row (``cmr.store.single_rows``): a page
reads those by their blocks (``cmr.store.block_pages``) where ``by_blocks`` says so.

Both dialects bind named parameters (``Dialect``) and compare row values; the statements are
otherwise the same text.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cmr.store.base import STATUS_ERROR, SequenceQuery
from cmr.store.listing import (
    LONGEST,
    NEWEST,
    UNDECIDED,
    UNENDED,
    PageKey,
    PageKind,
    matching_names,
)
from cmr.store.rules import COMPLETE, INCOMPLETE, RUNNING

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Any, Final, NamedTuple, TypeAlias


@dataclass(frozen=True, slots=True)
class Dialect:
    placeholder: str  # how a named parameter is written: "{}" becomes its name
    #: How a condition few rows pass is written: SQLite plans without statistics on the
    #: duration, and is told (``likelihood``); PostgreSQL has them.
    selective: str
    #: The band of a duration (``{0}``) its duration index leads with (``DURATION_BAND``), or
    #: None: the index is by the duration itself.
    band: str | None = None

    def __call__(self, name: str) -> str:
        return self.placeholder.format(name)


#: A duration's band in SQLite's ``sequences_by_duration`` (schema 15): its number of decimal
#: digits and its first two (a band is a hundredth of its decade or less; negative durations
#: fall in the first), so that the index is ordered by band and then by start, as sequences
#: arrive: each new row goes at the end of its band, not at a random place in one ordering of
#: every duration (a row ingested then costs a few pages written at commit, not one each: issue
#: 33). The band never decreases as the duration grows, so ordering by band and then by the
#: duration is ordering by the duration; the bands a range of durations spans bound its read.
DURATION_BAND: Final = "(length(max({0}, 0)) * 100 + CAST(substr(max({0}, 0), 1, 2) AS INTEGER))"

SQLITE: Final = Dialect(":{}", "likelihood({}, 0.001)", DURATION_BAND)
POSTGRES: Final = Dialect("%({})s", "{}")


if TYPE_CHECKING:

    class Plan(NamedTuple):
        """What a store asks its database once per listing query, before reading pages."""

        names: list[str] | None  # the decided root names the pattern matches (matching_names)
        few_durations: bool  # the duration range holds few rows: read them by their index

else:  # the same, without typing (a listing loads none)
    Plan = namedtuple("Plan", ("names", "few_durations"))


#: Rows a statement with named parameters gives (a store's connection).
Rows: TypeAlias = "Callable[[str, Mapping[str, object]], list[tuple[Any, ...]]]"
#: At most this many rows in the duration range and its index reads them all, then sorts
#: (at most this many); more, and the start index is walked newest first until enough pass.
FEW_DURATIONS: Final = 4096

#: The distinct root names of decided rows, smallest first: one seek in ``sequences_by_root``
#: per name (a loose index scan), whatever the number of sequences, and one in
#: ``single_block_roots`` (single rows: ``cmr.store.block_pages``); at most {limit}.
ROOT_NAMES: Final = """
    WITH RECURSIVE names (name) AS (
        SELECT min(n) FROM (
            SELECT min(root_name) AS n FROM sequences WHERE one_batch IS NULL
            UNION ALL SELECT min(root_name) FROM single_block_roots) AS first_names
        UNION ALL
        SELECT (SELECT min(n) FROM (
            SELECT min(root_name) AS n FROM sequences
            WHERE one_batch IS NULL AND root_name > names.name
            UNION ALL SELECT min(root_name) FROM single_block_roots WHERE root_name > names.name
        ) AS next_names)
        FROM names WHERE names.name IS NOT NULL
    )
    SELECT name FROM names WHERE name IS NOT NULL LIMIT {limit}"""
#: What a page's rows keep single rows out by: the start, root and duration indexes hold none
#: (``cmr.store.block_pages``).
NOT_SINGLE: Final = "one_batch IS NULL"
#: More distinct root names than this and a root pattern selects on the lines alone.
MAX_ROOT_NAMES: Final = 4096

_DURATION: Final = "(end_ns - start_ns)"
_COLUMNS: Final = "seq, start_ns, invocations"
_NEWEST_FIRST: Final = "ORDER BY start_ns DESC, seq DESC"
_LONGEST_KEYS: Final = f"{_DURATION} DESC, start_ns DESC, seq DESC"
#: A sequence with an invocation open, driven from ``open_calls`` (few rows: what still runs,
#: or never will end).
_AMONG_OPEN: Final = "seq IN (SELECT o.seq FROM open_calls o)"


#: A listing line's root (untrue, handed, start, puid, iid, method, end, exception) and its
#: method (module, qualname, file, line), both stores: from its ``seq_roots`` row ``r`` and the
#: root's late End ``l``, or from a single row's own columns (``q.one_batch`` set:
#: ``cmr.store.single_rows``; a true root, decided, ended: its end and exception are the row's).
PICKED_ROOT_COLUMNS: Final = """
           coalesce(r.untrue, 0), coalesce(r.handed, 0), coalesce(r.start_ns, q.start_ns),
           coalesce(r.puid, q.one_puid), coalesce(r.iid, q.one_iid),
           coalesce(r.method, q.one_method),
           CASE WHEN r.seq IS NULL THEN q.end_ns ELSE coalesce(r.end_ns, l.end_ns) END,
           CASE WHEN r.seq IS NULL THEN q.error
                WHEN r.end_ns IS NULL THEN l.error ELSE r.error END,
           m.module, m.qualname, m.file, m.line"""
#: The sequences a page picks (``picked``, put in place of {picked}) as ``s``, with their rows
#: ``q`` and what ``PICKED_ROOT_COLUMNS`` reads.
PICKED_ROOT_FROM: Final = """
    FROM ({picked}) s
    JOIN sequences q ON q.seq = s.seq
    LEFT JOIN seq_roots r ON r.seq = s.seq AND q.one_batch IS NULL
    LEFT JOIN late_ends l ON l.puid = r.puid AND l.iid = r.iid
    LEFT JOIN methods m ON m.puid = coalesce(r.puid, q.one_puid)
                       AND m.method = coalesce(r.method, q.one_method)
    WHERE r.seq IS NOT NULL OR q.one_batch IS NOT NULL"""


def plan(query: SequenceQuery | None, dialect: Dialect, rows: Rows) -> Plan:
    """The root names the query's pattern matches (a loose index scan), and whether its
    duration range is narrow (a count in the duration index, stopped past FEW_DURATIONS)."""
    names = None
    if query is not None and query.root is not None:
        limit = {"names_limit": MAX_ROOT_NAMES + 1}
        found = [
            str(name) for (name,) in rows(ROOT_NAMES.format(limit=dialect("names_limit")), limit)
        ]
        names = matching_names(query.root, found, complete=len(found) <= MAX_ROOT_NAMES)
    few = False
    if query is not None:
        params: dict[str, object] = {}
        within = _durations(query, dialect, params)
        if within:
            within.append(NOT_SINGLE)  # the partial duration index's (single rows apart)
            probe = (
                f"SELECT count(*) FROM (SELECT 1 FROM sequences WHERE {' AND '.join(within)} "
                f"LIMIT {FEW_DURATIONS + 1}) AS p"
            )
            [(count,)] = rows(probe, params)
            few = int(count) <= FEW_DURATIONS
    return Plan(names, few)


def key_params(key: PageKey, size: int) -> dict[str, object]:
    """The parameters binding a page's key and size (``picked``; a LONGEST page's key has
    three parts)."""
    if len(key) == 3:
        duration, start, seq = key
        return {"duration": duration, "start": start, "seq": seq, "limit": size}
    start, seq = key
    return {"start": start, "seq": seq, "limit": size}


def picked(
    kind: PageKind, query: SequenceQuery | None, plan: Plan, dialect: Dialect
) -> tuple[str, dict[str, object]]:
    """A statement selecting (seq, start_ns, invocations) of a page of ``kind``, and the
    parameters it binds besides the key (``start``, ``seq``, and for the longest ``duration``)
    and the page size (``limit``), as ``plan`` found the query."""
    where = window_conditions(query, dialect)
    params: dict[str, object] = {}
    if query is not None:
        params |= {"since": query.since_ns, "until": query.until_ns, "host": query.host}
    open_test = _open_test(query)
    if open_test:
        where.append(open_test)
    decided = decided_conditions(query, plan, dialect, params)
    if kind == LONGEST:
        after = f"({_DURATION}, start_ns, seq) < ({dialect('duration')}, {dialect('start')}, "
        after += f"{dialect('seq')})"
        ended = [*where, *_only_decided(decided), "end_ns IS NOT NULL", after]
        ended.append(NOT_SINGLE)  # the single rows are read by their blocks
        order = f"ORDER BY {_LONGEST_KEYS}"
        if dialect.band is not None:  # the bands first: the index's order
            ended.append(_banded("<=", dialect("duration"), dialect.band))
            order = f"ORDER BY {dialect.band.format(_DURATION)} DESC, {_LONGEST_KEYS}"
        return _select(ended, order, dialect), params
    where.append(f"(start_ns, seq) < ({dialect('start')}, {dialect('seq')})")
    undecided = _select([*where, "root_name IS NULL"], _NEWEST_FIRST, dialect)
    if kind == UNDECIDED:
        return undecided, params
    if kind == UNENDED:
        unended = [*where, *_only_decided(decided), "end_ns IS NULL"]
        unended.append(NOT_SINGLE)  # (never a single row: the start index holds none)
        return _select(unended, _NEWEST_FIRST, dialect), params
    apart = by_blocks(kind, query, plan)
    return _newest(where, decided, undecided, apart, dialect), params


def _newest(
    where: list[str], decided: list[str] | None, undecided: str, apart: bool, dialect: Dialect
) -> str:
    """A NEWEST page's statement: the decided rows the keys select (but the single rows where
    those are read ``apart``, by their blocks) and the undecided ones."""
    if decided is None and apart:  # the keys do not matter, but the start index is partial
        decided = ["root_name IS NOT NULL"]
    if decided is None:  # where the keys do not matter
        return _select(where, _NEWEST_FIRST, dialect)
    if not decided:  # a pattern matching no decided row's name
        return undecided
    if apart:
        decided.append(NOT_SINGLE)  # the single rows are read by their blocks
    return _union([_select([*where, *decided], _NEWEST_FIRST, dialect), undecided], dialect)


def by_blocks(kind: PageKind, query: SequenceQuery | None, plan: Plan) -> bool:
    """Whether a page of ``kind`` reads the single rows it wants by their blocks (the start,
    root and duration indexes hold no single row: ``cmr.store.block_pages``): a page longest
    first, or newest first but for errors alone (the failed index holds every row)."""
    if query is not None and query.status in (RUNNING, INCOMPLETE):
        return False  # a single row is decided and ended: never running nor incomplete
    if kind == LONGEST or query is None:
        return kind in (LONGEST, NEWEST)
    if kind != NEWEST:
        return False  # (a single row is decided and ended: never undecided nor unended)
    names = plan.names if query.root is not None else None
    keyed = names is not None or (
        query.min_duration_ns is not None or query.max_duration_ns is not None
    )
    return keyed or query.status != STATUS_ERROR  # (the failed index holds every row)


def _only_decided(decided: list[str] | None) -> list[str]:
    """The conditions keeping the decided rows the keys select."""
    if decided is None:
        return ["root_name IS NOT NULL"]
    return decided or ["1 = 0"]


def window_conditions(query: SequenceQuery | None, dialect: Dialect) -> list[str]:
    if query is None:
        return []
    where: list[str] = []
    if query.since_ns is not None:
        where.append(f"start_ns >= {dialect('since')}")
    if query.until_ns is not None:
        where.append(f"start_ns <= {dialect('until')}")
    if query.host is not None:
        # Its threads' processes, and a single row's own (``cmr.store.single_rows``).
        where.append(
            "(EXISTS (SELECT 1 FROM seq_threads t JOIN processes p ON p.puid = t.puid "
            f"WHERE t.seq = sequences.seq AND p.host = {dialect('host')}) "
            "OR EXISTS (SELECT 1 FROM processes p "
            f"WHERE p.puid = sequences.one_puid AND p.host = {dialect('host')}))"
        )
    return where


def _open_test(query: SequenceQuery | None) -> str | None:
    """Whether the sequence's root may still be open, as the status asks: a sequence follows
    its root (``rules.sequence_status``), so a decided row is complete once it has an end
    (its own column: no lookup) and running or incomplete while it has none; those are read
    from ``open_calls`` (few rows), as a root still open is among them. An undecided row's
    line decides (running and incomplete differ by the process's state, which it knows)."""
    status = None if query is None else query.status
    if status in (RUNNING, INCOMPLETE):
        return f"{_AMONG_OPEN} AND (root_name IS NULL OR end_ns IS NULL)"
    if status in (COMPLETE, STATUS_ERROR):
        return "(root_name IS NULL OR end_ns IS NOT NULL)"
    return None


def decided_conditions(
    query: SequenceQuery | None, plan: Plan, dialect: Dialect, params: dict[str, object]
) -> list[str] | None:
    """The conditions on a decided row's keys (None: the query asks nothing of them; an empty
    list: its pattern matches no decided row)."""
    if query is None:
        return None
    where: list[str] = []
    names = plan.names if query.root is not None else None
    if names is not None:
        if not names:
            return []
        placeholders = []
        for at, name in enumerate(names):
            params[f"name{at}"] = name
            placeholders.append(dialect(f"name{at}"))
        where.append(f"root_name IN ({', '.join(placeholders)})")
    within = _durations(query, dialect, params)
    where += [dialect.selective.format(c) for c in within] if plan.few_durations else within
    if query.status == STATUS_ERROR:
        where.append("error IS NOT NULL")
    elif query.status == COMPLETE:
        where.append("error IS NULL")
    if not where:
        return None
    return where if names is not None else ["root_name IS NOT NULL", *where]


def _durations(query: SequenceQuery, dialect: Dialect, params: dict[str, object]) -> list[str]:
    """The query's duration bounds, as conditions ``sequences_by_duration`` serves."""
    within: list[str] = []
    for name, value, compare in (
        ("min_duration", query.min_duration_ns, ">="),
        ("max_duration", query.max_duration_ns, "<="),
    ):
        if value is not None:
            params[name] = value
            within.append(f"{_DURATION} {compare} {dialect(name)}")
            if dialect.band is not None:
                within.append(_banded(compare, dialect(name), dialect.band))
    return within


def _banded(compare: str, bound: str, band: str) -> str:
    """The condition on the duration's band that a condition ``duration compare bound`` implies
    (the range of the index to read)."""
    return f"{band.format(_DURATION)} {compare} {band.format(bound)}"


def _select(where: list[str], order: str, dialect: Dialect) -> str:
    condition = " AND ".join(where) if where else "TRUE"
    return f"SELECT {_COLUMNS} FROM sequences WHERE {condition} {order} LIMIT {dialect('limit')}"


def _union(branches: list[str], dialect: Dialect) -> str:
    if len(branches) == 1:
        return branches[0]
    parts = " UNION ALL ".join(
        f"SELECT {_COLUMNS} FROM ({branch}) AS b{at}" for at, branch in enumerate(branches)
    )
    return f"SELECT {_COLUMNS} FROM ({parts}) AS u {_NEWEST_FIRST} LIMIT {dialect('limit')}"

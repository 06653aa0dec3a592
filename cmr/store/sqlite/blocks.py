"""Single rows listed by their blocks (SQLite schema 16, ``SINGLE_BLOCKS_SCHEMA``).

A request-shaped sequence is one ``sequences`` row (``cmr.store.sqlite.single``). Each index on
that row is a B-tree row written per request, and the root and duration indexes are written at
as many places as there are root names and duration bands: SQLite rebalances pages in the middle
of a B-tree at several times the cost of an append. Those two, the start index and the batch
index were half of a request's cost to the repository (issue 33, goal 6). Here the first three
hold no single row (they are partial: ``one_batch IS NULL``) and the fourth is gone: the single
rows a group stores get consecutive rowids, and the group writes one *block* describing them
(``record``): its rowid range, the range of their starts, their longest duration, per root name
the latest start and the longest duration of that root's rows there, and the batches they came
from. A listing page (``page``; which ones: ``listing_sql.by_blocks``) reads the blocks its
query allows, latest or longest first, each by its rowid range, and stops once the page is full
of rows no block left could beat: a block read holds at least one row its zone allows, so a
query for something rare reads few blocks, and one for something common reads few because the
page fills at once. ``newest_first`` gives every single row newest first the same way (the
search by method), and ``prune`` reads the blocks that started before its cutoff. Every row is
in the range of the block its group wrote, whose zone bounds it; a range may also hold rows that
are not single rows any more, or not its own (a rowid reused after ``prune`` deleted the last
rows): the rows are checked one by one, and a row found twice is kept once.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Generator, Iterable, Iterator

from cmr.store.base import SequenceQuery
from cmr.store.listing import LONGEST, PageKey, PageKind, window
from cmr.store.listing_sql import SQLITE, Plan, by_blocks, decided_conditions, window_conditions

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Any, Final, TypeAlias

#: A picked row: seq, start_ns, invocations, duration (None: not ended).
Picked: TypeAlias = "tuple[bytes, int, int, int | None]"
#: A block as a page reads it: (first_row, last_row, its bound: (the latest start,) of the rows
#: it may give, or (the longest duration, the latest start)). Every row of the block ranks at most
#: as the bound followed by the greatest id: ``_AFTER_EVERY_SEQ``.
_Block: TypeAlias = "tuple[int, int, tuple[int, ...]]"
_AFTER_EVERY_SEQ: Final = b"\xff" * 17

#: The shortest duration a page asks when it asks none (below every duration).
_NO_SHORTEST: Final = -(2**63)
#: More blocks than this a duration allows, and they are read latest first until the page is
#: full, rather than all of them gathered and sorted.
FEW_BLOCKS: Final = 4096

_BLOCK: Final = "INSERT INTO single_blocks VALUES (?, ?, ?, ?, ?)"
_BLOCK_ROOT: Final = "INSERT INTO single_block_roots VALUES (?, ?, ?, ?)"
#: The batches whose single rows a new block holds (``prune`` keeps a batch or a process while
#: a single row names it: ``statements.PRUNE_BATCHES``).
_BLOCK_BATCHES: Final = """
    INSERT INTO single_block_batches
    SELECT DISTINCT one_puid, one_batch, ?, ? FROM sequences WHERE rowid BETWEEN ? AND ?"""
_DURATION: Final = "(end_ns - start_ns)"


#: The rows of a new block, by root name (NULL: undecided rows, listed by the start index): the
#: latest start and the longest duration of each, and the earliest start.
_ZONES: Final = """
    SELECT root_name, min(start_ns), max(start_ns), max(end_ns - start_ns) FROM sequences
    WHERE rowid BETWEEN ? AND ? GROUP BY root_name"""


#: A block's zones (as ``_ZONES`` reads them: root name, earliest start, latest start, longest
#: duration) and the (puid, batch_no) of its rows' batches.
Zones: TypeAlias = "tuple[list[tuple[str | None, int, int, int]], set[tuple[int, int]]]"


def record(
    conn: sqlite3.Connection, first_row: int, last_row: int, known: Zones | None = None
) -> None:
    """The block of the single rows just inserted with rowids ``first_row`` to ``last_row``;
    ``known``: their zones and batches (``single._bound`` made them), else read back."""
    zones = conn.execute(_ZONES, (first_row, last_row)).fetchall() if known is None else known[0]
    first = min(zone[1] for zone in zones)
    last = max(zone[2] for zone in zones)
    longest = max(zone[3] for zone in zones)
    conn.execute(_BLOCK, (first_row, last_row, first, last, longest))
    conn.executemany(
        _BLOCK_ROOT,
        [(name, latest, first_row, slowest) for name, _first, latest, slowest in zones if name],
    )
    if known is None:
        conn.execute(_BLOCK_BATCHES, (first_row, last_row, first_row, last_row))
    else:
        conn.executemany(
            "INSERT INTO single_block_batches VALUES (?, ?, ?, ?)",
            [(puid, batch_no, first_row, last_row) for puid, batch_no in sorted(known[1])],
        )


def prune(conn: sqlite3.Connection, before_ns: int) -> None:
    """Forget the blocks whose every row started before ``before_ns`` (pruned), and the
    batches of blocks that ``prune`` deleted."""
    conn.execute("DELETE FROM single_block_roots WHERE last_ns < ?", (before_ns,))
    conn.execute("DELETE FROM single_blocks WHERE last_ns < ?", (before_ns,))
    conn.execute(
        "DELETE FROM single_block_batches WHERE NOT EXISTS (SELECT 1 FROM batches b "
        "WHERE b.puid = single_block_batches.puid AND b.batch_no = single_block_batches.batch_no)"
    )


def page(
    conn: sqlite3.Connection,
    kind: PageKind,
    key: PageKey,
    size: int,
    *,
    query: SequenceQuery | None,
    plan: Plan,
) -> list[Picked]:
    """The single rows a page of ``kind`` after ``key`` picks (``listing_sql.picked``'s
    conditions), at most ``size``, in the page's order; none where the page reads them by the
    indexes (``listing_sql.by_blocks``)."""
    if not by_blocks(kind, query, plan):
        return []
    params: dict[str, object] = {"limit": size}
    where = ["one_batch IS NOT NULL", "rowid BETWEEN :first AND :last"]
    if query is not None:
        params |= {"since": query.since_ns, "until": query.until_ns, "host": query.host}
        where += window_conditions(query, SQLITE)
    decided = decided_conditions(query, plan, SQLITE, params)
    if decided == []:
        return []  # a pattern matching no decided row's name
    where += decided or ["root_name IS NOT NULL"]
    names = plan.names if query is not None and query.root is not None else None
    longest = kind == LONGEST
    if longest:
        duration, start, seq = key  # type: ignore[misc]
        params |= {"duration": duration, "start": start, "seq": seq}
        where += ["end_ns IS NOT NULL", f"({_DURATION}, start_ns, seq) < (:duration, :start, :seq)"]
        order = f"{_DURATION} DESC, start_ns DESC, seq DESC"
    else:
        start, seq = key  # type: ignore[misc]
        params |= {"start": start, "seq": seq}
        where.append("(start_ns, seq) < (:start, :seq)")
        order = "start_ns DESC, seq DESC"
    statement = (
        f"SELECT seq, start_ns, invocations, {_DURATION} FROM sequences "
        f"WHERE {' AND '.join(where)} ORDER BY {order} LIMIT :limit"
    )
    found: dict[bytes, Picked] = {}
    best: list[Picked] = []
    sort_key = longest_key if longest else newest_key
    blocks = _blocks(conn, longest, query, names, key)
    try:
        for first_row, last_row, bound in blocks:
            if len(best) >= size and sort_key(best[size - 1]) > (*bound, _AFTER_EVERY_SEQ):
                break  # no row left can enter the page
            params |= {"first": first_row, "last": last_row}
            for row in conn.execute(statement, params):
                found.setdefault(row[0], row)
            best = sorted(found.values(), key=sort_key, reverse=True)[:size]
            found = {row[0]: row for row in best}
    finally:
        blocks.close()
    return best


def newest_first(
    conn: sqlite3.Connection, columns: str, since_ns: int
) -> Iterator[tuple[Any, ...]]:
    """``columns`` of every single row that started at ``since_ns`` or later (its start and id
    first), newest first, read block by block as far as the caller reads: a row is given once
    no block left can hold a newer one."""
    statement = (
        f"SELECT start_ns, seq, {columns} FROM sequences "
        "WHERE rowid BETWEEN ? AND ? AND one_batch IS NOT NULL AND start_ns >= ?"
    )
    waiting: list[tuple[int, bytes, tuple[Any, ...]]] = []  # (-start, inverted id, row)
    blocks = conn.execute(
        "SELECT first_row, last_row, last_ns FROM single_blocks INDEXED BY single_blocks_by_last "
        "WHERE last_ns >= ? ORDER BY last_ns DESC",
        (since_ns,),
    )
    seen: set[bytes] = set()
    try:
        for first_row, last_row, last_ns in blocks:
            while waiting and -waiting[0][0] > last_ns:
                yield heapq.heappop(waiting)[2]
            for row in conn.execute(statement, (first_row, last_row, since_ns)):
                if row[1] not in seen:
                    seen.add(row[1])
                    heapq.heappush(waiting, (-row[0], bytes(255 - b for b in row[1]), row))
        while waiting:
            yield heapq.heappop(waiting)[2]
    finally:
        blocks.close()


def newest_key(row: Picked) -> tuple[int, bytes]:
    return (row[1], row[0])


def longest_key(row: Picked) -> tuple[int, int, bytes]:
    return (row[3] or 0, row[1], row[0])


def _blocks(
    conn: sqlite3.Connection,
    longest: bool,
    query: SequenceQuery | None,
    names: list[str] | None,
    key: PageKey,
) -> Generator[_Block, None, None]:
    """The blocks a page may read, the highest bound first (the latest start, or the longest
    duration, of the rows of each that the query may want), each once."""
    columns = ("longest_ns", "last_ns") if longest else ("last_ns",)
    since, until = window(query)
    if not longest:
        until = min(until, key[0])  # a row after the key starts at most there
    shortest = None if query is None else query.min_duration_ns
    params: dict[str, object] = {
        "since": since,
        "until": until,
        "shortest": _NO_SHORTEST if shortest is None else shortest,
    }
    cursors: list[sqlite3.Cursor] = []
    try:
        if names is not None:  # each name's rows, the bound that of the name's own rows
            on_roots = ", ".join(f"r.{column}" for column in columns)
            on_roots_order = ", ".join(f"r.{column} DESC" for column in columns)
            for name in names:
                cursors.append(
                    conn.execute(
                        f"SELECT b.first_row, b.last_row, {on_roots} FROM single_block_roots r "
                        "JOIN single_blocks b ON b.first_row = r.first_row "
                        "WHERE r.root_name = :name AND r.last_ns >= :since "
                        "AND r.longest_ns >= :shortest AND b.first_ns <= :until "
                        f"ORDER BY {on_roots_order}",
                        params | {"name": name},
                    )
                )
            yield from _once(
                heapq.merge(
                    *(map(_as_block, cursor) for cursor in cursors), reverse=True, key=_bound
                )
            )
            return
        where = "last_ns >= :since AND first_ns <= :until AND longest_ns >= :shortest"
        if not longest and shortest is not None:  # few blocks may hold what is asked
            cursors.append(
                conn.execute(
                    "SELECT first_row, last_row, last_ns FROM single_blocks "
                    f"INDEXED BY single_blocks_by_longest WHERE {where} LIMIT {FEW_BLOCKS + 1}",
                    params,
                )
            )
            few = cursors[-1].fetchall()
            if len(few) <= FEW_BLOCKS:
                yield from _once(sorted(map(_as_block, few), key=_bound, reverse=True))
                return
        index = "single_blocks_by_longest" if longest else "single_blocks_by_last"
        cursors.append(
            conn.execute(
                f"SELECT first_row, last_row, {', '.join(columns)} FROM single_blocks "
                f"INDEXED BY {index} WHERE {where} ORDER BY {' DESC, '.join(columns)} DESC",
                params,
            )
        )
        yield from _once(map(_as_block, cursors[-1]))
    finally:
        for cursor in cursors:
            cursor.close()


def _as_block(row: tuple[int, ...]) -> _Block:
    return (row[0], row[1], row[2:])


def _bound(block: _Block) -> tuple[int, ...]:
    return block[2]


def _once(blocks: Iterable[_Block]) -> Iterator[_Block]:
    seen: set[int] = set()
    for block in blocks:
        if block[0] not in seen:
            seen.add(block[0])
            yield block

"""Single rows read by their blocks, in both SQL stores (SQLite's schema 16, PostgreSQL's
migration 11).

A request-shaped sequence is one ``sequences`` row (``cmr.store.single_rows``). Each index on
that row is an entry written per request, and the root and duration indexes are written at as
many places as there are root names and durations: half of a request's cost to the repository
(issue 33, goal 6). So the start, root and duration indexes hold no single row (they are
partial: ``one_batch IS NULL``), and the single rows a group stores are described by *blocks*:
each block row gives the range of its rows' starts, their longest duration, and per root name
(``single_block_roots``) the latest start and the longest duration of that root's rows there.
A store says what a block is (``BlockLayout``): in SQLite a rowid range of the rows one group
inserted, in PostgreSQL the single rows of one batch, found by the index by batch every single
row already has.

A listing page (``page``; which ones: ``listing_sql.by_blocks``) reads the blocks its query
allows, latest or longest first, each by its key, and stops once the page is full of rows no
block left could beat: a block read holds at least one row its zone allows, so a query for
something rare reads few blocks, and one for something common reads few because the page fills
at once. ``newest_first`` gives every single row newest first the same way (the search by
method). Every single row is in the block its group wrote, whose zone bounds it; a block may
also hold rows that are not single rows any more, or not its own (a SQLite rowid used again
after ``prune``): the rows are checked one by one, and a row found twice is kept once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass

from cmr.store.base import SequenceQuery
from cmr.store.listing import LONGEST, PageKey, PageKind, window
from cmr.store.listing_sql import Dialect, Plan, by_blocks, decided_conditions, window_conditions

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Any, Final, Protocol, TypeAlias

    class Cursor(Protocol):
        """What ``execute`` gives: rows, read as far as the caller reads, then closed."""

        def __iter__(self) -> Iterator[Any]: ...

        def fetchall(self) -> list[Any]: ...

        def close(self) -> None: ...


#: A store's connection's ``execute``, with named parameters.
Execute: TypeAlias = "Callable[[str, Mapping[str, object]], Cursor]"
#: A picked row: seq, start_ns, invocations, duration (None: not ended).
Picked: TypeAlias = "tuple[bytes, int, int, int | None]"
#: A block as a page reads it: (its key's two parts, its bound: (the latest start,) of the rows
#: it may give, or (the longest duration, the latest start)). Every row of the block ranks at most
#: as the bound followed by the greatest id: ``_AFTER_EVERY_SEQ``.
_Block: TypeAlias = "tuple[int, int, tuple[int, ...]]"
_AFTER_EVERY_SEQ: Final = b"\xff" * 17

#: The shortest duration a page asks when it asks none (below every duration).
_NO_SHORTEST: Final = -(2**63)
#: More blocks than this a duration allows, and they are read latest first until the page is
#: full, rather than all of them gathered and sorted.
FEW_BLOCKS: Final = 4096
_DURATION: Final = "(end_ns - start_ns)"


@dataclass(frozen=True, slots=True)
class BlockLayout:
    """What a block is in one store."""

    dialect: Dialect
    #: The two columns of ``single_blocks`` naming a block.
    key: tuple[str, str]
    #: The columns of ``single_block_roots`` naming its block (``single_blocks``' of that name).
    roots_key: tuple[str, ...]
    #: The condition on a ``sequences`` row that it is one of the block's single rows, the key's
    #: parts bound as ``first`` and ``last``.
    rows_of_block: str
    #: After ``FROM single_blocks``: how to read it by its last start, and by its longest
    #: duration (SQLite is told which index; PostgreSQL plans with statistics).
    by_last: str = ""
    by_longest: str = ""


def page(
    execute: Execute,
    layout: BlockLayout,
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
    dialect = layout.dialect
    params: dict[str, object] = {"limit": size}
    where = [layout.rows_of_block]
    if query is not None:
        params |= {"since": query.since_ns, "until": query.until_ns, "host": query.host}
        where += window_conditions(query, dialect)
    decided = decided_conditions(query, plan, dialect, params)
    if decided == []:
        return []  # a pattern matching no decided row's name
    where += decided or ["root_name IS NOT NULL"]
    names = plan.names if query is not None and query.root is not None else None
    longest = kind == LONGEST
    if longest:
        duration, start, seq = key  # type: ignore[misc]
        params |= {"duration": duration, "start": start, "seq": seq}
        after = f"({dialect('duration')}, {dialect('start')}, {dialect('seq')})"
        where += ["end_ns IS NOT NULL", f"({_DURATION}, start_ns, seq) < {after}"]
        order = f"{_DURATION} DESC, start_ns DESC, seq DESC"
    else:
        start, seq = key  # type: ignore[misc]
        params |= {"start": start, "seq": seq}
        where.append(f"(start_ns, seq) < ({dialect('start')}, {dialect('seq')})")
        order = "start_ns DESC, seq DESC"
    statement = (
        f"SELECT seq, start_ns, invocations, {_DURATION} FROM sequences "
        f"WHERE {' AND '.join(where)} ORDER BY {order} LIMIT {dialect('limit')}"
    )
    found: dict[bytes, Picked] = {}
    best: list[Picked] = []
    sort_key = longest_key if longest else newest_key
    blocks = _blocks(execute, layout, longest, query=query, names=names, key=key)
    try:
        for first, last, bound in blocks:
            if len(best) >= size and sort_key(best[size - 1]) > (*bound, _AFTER_EVERY_SEQ):
                break  # no row left can enter the page
            params |= {"first": first, "last": last}
            for seq_value, *row in execute(statement, params):
                found.setdefault(bytes(seq_value), (bytes(seq_value), *row))
            best = sorted(found.values(), key=sort_key, reverse=True)[:size]
            found = {row[0]: row for row in best}
    finally:
        blocks.close()
    return best


def newest_first(
    execute: Execute, layout: BlockLayout, columns: str, since_ns: int
) -> Iterator[tuple[Any, ...]]:
    """``columns`` of every single row that started at ``since_ns`` or later (its start and id
    first), newest first, read block by block as far as the caller reads: a row is given once
    no block left can hold a newer one."""
    dialect = layout.dialect
    statement = (
        f"SELECT start_ns, seq, {columns} FROM sequences "
        f"WHERE {layout.rows_of_block} AND start_ns >= {dialect('since')}"
    )
    waiting: list[tuple[int, bytes, tuple[Any, ...]]] = []  # (-start, inverted id, row)
    blocks = execute(
        f"SELECT {', '.join(layout.key)}, last_ns FROM single_blocks {layout.by_last} "
        f"WHERE last_ns >= {dialect('since')} ORDER BY last_ns DESC",
        {"since": since_ns},
    )
    seen: set[bytes] = set()
    try:
        for first, last, last_ns in blocks:
            while waiting and -waiting[0][0] > last_ns:
                yield heapq.heappop(waiting)[2]
            for start_ns, seq_value, *rest in execute(
                statement, {"first": first, "last": last, "since": since_ns}
            ):
                seq = bytes(seq_value)
                if seq not in seen:
                    seen.add(seq)
                    row = (start_ns, seq, *rest)
                    heapq.heappush(waiting, (-start_ns, bytes(255 - b for b in seq), row))
        while waiting:
            yield heapq.heappop(waiting)[2]
    finally:
        blocks.close()


def merged(
    execute: Execute,
    dialect: Dialect,
    kind: PageKind,
    size: int,
    *,
    sql_page: tuple[str, dict[str, object]],
    singles: list[Picked],
) -> tuple[str, dict[str, object]]:
    """A statement picking the first ``size``, in the page's order, of the rows the page's own
    statement picks (``sql_page``) and the single rows its blocks gave (``singles``): a page
    holds no row after one it leaves out."""
    picked_sql, params = sql_page
    rows: list[Picked] = [
        (bytes(seq), start_ns, invocations, duration)
        for seq, start_ns, invocations, duration in execute(
            f"SELECT p.seq, p.start_ns, p.invocations, q.end_ns - q.start_ns "
            f"FROM ({picked_sql}) p JOIN sequences q ON q.seq = p.seq",
            params,
        ).fetchall()
    ]
    order = longest_key if kind == LONGEST else newest_key
    first = sorted([*rows, *singles], key=order, reverse=True)[:size]
    seqs: dict[str, object] = {f"s{at}": row[0] for at, row in enumerate(first)}
    marks = ", ".join(dialect(name) for name in seqs) or "NULL"
    return f"SELECT seq, start_ns, invocations FROM sequences WHERE seq IN ({marks})", seqs


def start_and_id(row: tuple[Any, ...]) -> tuple[int, bytes]:
    """A row's place newest first where its start and id are its first two columns (as
    ``newest_first`` gives them: merged with the other rows of a search by method)."""
    return (row[0], bytes(row[1]))


def newest_key(row: Picked) -> tuple[int, bytes]:
    return (row[1], row[0])


def longest_key(row: Picked) -> tuple[int, int, bytes]:
    return (row[3] or 0, row[1], row[0])


def _blocks(
    execute: Execute,
    layout: BlockLayout,
    longest: bool,
    *,
    query: SequenceQuery | None,
    names: list[str] | None,
    key: PageKey,
) -> Generator[_Block, None, None]:
    """The blocks a page may read, the highest bound first (the latest start, or the longest
    duration, of the rows of each that the query may want), each once."""
    dialect = layout.dialect
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
    block_key = ", ".join(layout.key)
    cursors: list[Cursor] = []
    try:
        if names is not None:  # each name's rows, the bound that of the name's own rows
            on_roots = ", ".join(f"r.{column}" for column in columns)
            on_roots_order = ", ".join(f"r.{column} DESC" for column in columns)
            joined = " AND ".join(f"b.{column} = r.{column}" for column in layout.roots_key)
            for name in names:
                cursors.append(
                    execute(
                        f"SELECT {', '.join(f'b.{c}' for c in layout.key)}, {on_roots} "
                        f"FROM single_block_roots r JOIN single_blocks b ON {joined} "
                        f"WHERE r.root_name = {dialect('name')} "
                        f"AND r.last_ns >= {dialect('since')} "
                        f"AND r.longest_ns >= {dialect('shortest')} "
                        f"AND b.first_ns <= {dialect('until')} ORDER BY {on_roots_order}",
                        params | {"name": name},
                    )
                )
            yield from _once(
                heapq.merge(
                    *(map(_as_block, cursor) for cursor in cursors), reverse=True, key=_bound
                )
            )
            return
        where = (
            f"last_ns >= {dialect('since')} AND first_ns <= {dialect('until')} "
            f"AND longest_ns >= {dialect('shortest')}"
        )
        if not longest and shortest is not None:  # few blocks may hold what is asked
            cursors.append(
                execute(
                    f"SELECT {block_key}, last_ns FROM single_blocks {layout.by_longest} "
                    f"WHERE {where} LIMIT {FEW_BLOCKS + 1}",
                    params,
                )
            )
            few = cursors[-1].fetchall()
            if len(few) <= FEW_BLOCKS:
                yield from _once(sorted(map(_as_block, few), key=_bound, reverse=True))
                return
        index = layout.by_longest if longest else layout.by_last
        cursors.append(
            execute(
                f"SELECT {block_key}, {', '.join(columns)} FROM single_blocks {index} "
                f"WHERE {where} ORDER BY {' DESC, '.join(columns)} DESC",
                params,
            )
        )
        yield from _once(map(_as_block, cursors[-1]))
    finally:
        for cursor in cursors:
            cursor.close()


def _as_block(row: tuple[int, ...]) -> _Block:
    return (row[0], row[1], tuple(row[2:]))


def _bound(block: _Block) -> tuple[int, ...]:
    return block[2]


def _once(blocks: Iterable[_Block]) -> Iterator[_Block]:
    seen: set[tuple[int, int]] = set()
    for block in blocks:
        if block[:2] not in seen:
            seen.add(block[:2])
            yield block

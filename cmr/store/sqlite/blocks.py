"""SQLite's blocks of single rows (schema 16, ``SINGLE_BLOCKS_SCHEMA``), the write side:
``cmr.store.block_pages`` says why single rows are listed by blocks and reads them.

Here a block is a rowid range: the single rows a group stores get consecutive rowids, and the
group writes one block describing them (``record``): its rowid range, the range of their
starts, their longest duration, per root name the latest start and the longest duration of
that root's rows there, and the batches they came from (``single_block_batches``: ``prune``
keeps a batch or a process while a single row names it). ``prune`` forgets the blocks that
started before its cutoff. A range may also hold rows that are not its own (a rowid used again
after ``prune`` deleted the last rows): ``block_pages`` checks the rows one by one.
"""

from __future__ import annotations

import sqlite3

from cmr.store.block_pages import BlockLayout
from cmr.store.listing_sql import SQLITE

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final, TypeAlias

#: A block is the rowid range ``first_row`` to ``last_row``.
LAYOUT: Final = BlockLayout(
    SQLITE,
    key=("first_row", "last_row"),
    roots_key=("first_row",),
    rows_of_block="rowid BETWEEN :first AND :last AND one_batch IS NOT NULL",
    by_last="INDEXED BY single_blocks_by_last",
    by_longest="INDEXED BY single_blocks_by_longest",
)

_BLOCK: Final = "INSERT INTO single_blocks VALUES (?, ?, ?, ?, ?)"
_BLOCK_ROOT: Final = "INSERT INTO single_block_roots VALUES (?, ?, ?, ?)"
#: The batches whose single rows a new block holds (``prune`` keeps a batch or a process while
#: a single row names it: ``statements.PRUNE_BATCHES``).
_BLOCK_BATCHES: Final = """
    INSERT INTO single_block_batches
    SELECT DISTINCT one_puid, one_batch, ?, ? FROM sequences WHERE rowid BETWEEN ? AND ?"""


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

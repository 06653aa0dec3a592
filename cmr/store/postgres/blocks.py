"""PostgreSQL's blocks of single rows (migration 11, ``schema.SINGLE_BLOCKS``):
``cmr.store.block_pages`` says why single rows are listed by blocks and reads them.

Here a block is the single rows of one batch: every single row names its batch
(``one_puid``, ``one_batch``) and the index by batch finds them, so a block costs no column
and no index entry a row. A group writes its single rows' blocks right after the rows
(``single.insert``, then ``single.write_blocks`` in the group's pipeline); ``prune`` forgets
the blocks that ended before its cutoff.
PostgreSQL has no rowid to give a group's rows a range, and ranges of ids would not do: a
sequence id continued from upstream is random.
"""

from __future__ import annotations

from typing import Final

from cmr.store.block_pages import BlockLayout
from cmr.store.listing_sql import POSTGRES
from cmr.store.postgres.connect import Conn

#: A block is a batch's single rows, found by ``sequences_by_batch``.
LAYOUT: Final = BlockLayout(
    POSTGRES,
    key=("puid", "batch_no"),
    roots_key=("puid", "batch_no"),
    rows_of_block="one_puid = %(first)s AND one_batch = %(last)s",
)
#: The single rows that started before %(before)s (``prune``), by the blocks that hold any: the
#: start index holds none.
PRUNED_SINGLES: Final = """
    SELECT q.seq FROM single_blocks b
    JOIN sequences q ON q.one_puid = b.puid AND q.one_batch = b.batch_no
    WHERE b.first_ns < %(before)s AND q.start_ns < %(before)s"""


def prune(conn: Conn, before_ns: int) -> None:
    """Forget the blocks whose every row started before ``before_ns`` (pruned)."""
    conn.execute("DELETE FROM single_block_roots WHERE last_ns < %s", (before_ns,))
    conn.execute("DELETE FROM single_blocks WHERE last_ns < %s", (before_ns,))

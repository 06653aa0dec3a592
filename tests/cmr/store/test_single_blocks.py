"""SQLite's single rows listed by their blocks (``cmr.store.sqlite.blocks``, schema 16): the
start, root and duration indexes hold no single row, and a listing, a search by method and
``prune`` read the single rows by the blocks their groups wrote. Across many blocks every answer
is what the side tables give, whatever the query, sort and page size, before and after a prune;
a query for a rare root reads the blocks holding it and no other; a rowid used again after
``prune`` lists its sequence once; an older file gets blocks for the single rows it holds."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from cmr.store import block_pages, open_store
from cmr.store.base import SORT_DURATION, SequenceQuery
from cmr.store.listing import FIRST_KEY, NEWEST
from cmr.store.listing_sql import SQLITE, plan
from cmr.store.sqlite import blocks
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock, make_batch
from tests.cmr.store.records import (
    repository_rows,
    seq_id,
    single_row_count,
    start,
    without_single_blocks,
)
from tests.cmr.store.request_traffic import (
    RequestTraffic,
    blocks_read_as_side_tables,
    ingest,
    rare_root_reads_its_blocks,
    stored_as_older,
    upgraded_reads_the_same,
)


def test_many_blocks_list_what_the_side_tables_list(tmp_path: Path) -> None:
    urls = {on: str(tmp_path / f"layout-{on}.sqlite") for on in (False, True)}
    counted: list[object] = []

    def check_blocks() -> None:
        counted.extend(repository_rows(urls[True], "SELECT count(*) FROM single_blocks"))

    blocks_read_as_side_tables(urls, check_blocks)
    [(written,), (kept,)] = counted
    assert written == 30  # a block a group
    assert 0 < kept < written  # prune forgot the blocks whose rows it deleted


def test_a_page_for_a_rare_root_reads_only_the_blocks_holding_it(tmp_path: Path) -> None:
    rare_root_reads_its_blocks(str(tmp_path / "cmr.sqlite"), _picked_by_blocks)


def _picked_by_blocks(
    path: str, query: SequenceQuery, size: int
) -> tuple[list[block_pages.Picked], int]:
    """The first page of single rows ``query`` picks by blocks, and how many blocks it read."""
    conn = sqlite3.connect(path)
    try:
        found = plan(query, SQLITE, lambda sql, params: conn.execute(sql, params).fetchall())
        reads: list[str] = []
        conn.set_trace_callback(reads.append)
        picked = block_pages.page(
            conn.execute, blocks.LAYOUT, NEWEST, FIRST_KEY, size, query=query, plan=found
        )
    finally:
        conn.close()
    return picked, len([sql for sql in reads if "rowid BETWEEN" in sql])


def test_a_rowid_used_again_after_prune_lists_its_sequence_once(tmp_path: Path) -> None:
    # The last row of a group (its ids' order) started first: prune deletes it and keeps the
    # group's block, whose rowid range then also covers the next group's first row.
    early, late, later = seq_id("ff"), seq_id("01"), seq_id("80")
    first = {1: [start(1, 2_000, late), wire.End(1, 2_500), start(2, 1_000, early)]}
    first[1].append(wire.End(2, 1_200))
    second = {1: [start(3, 3_000, later), wire.End(3, 3_900)]}
    lines = {}
    for on in (False, True):
        store = open_store(str(tmp_path / f"layout-{on}.sqlite"), clock=FakeClock())
        try:
            ingest(store, [[make_batch(1, 1, first)]], on)
            store.prune(CLOCK_OFFSET_NS + 1_500)
            ingest(store, [[make_batch(1, 2, second)]], on, first=1)
            lines[on] = [
                [line.seq for line in store.list_sequences(10, query)]
                for query in (SequenceQuery(root="app.*"), SequenceQuery(sort=SORT_DURATION))
            ]
        finally:
            store.close()
    [(reused,)] = repository_rows(
        str(tmp_path / "layout-True.sqlite"),
        f"SELECT rowid FROM sequences WHERE seq = x'{later.hex()}'",
    )
    assert reused == 2  # the rowid of ``early``, pruned
    assert lines[True] == lines[False] == [[later, late], [later, late]]
    picked, _reads = _picked_by_blocks(
        str(tmp_path / "layout-True.sqlite"), SequenceQuery(root="app.*"), 10
    )
    assert [row[0] for row in picked] == [later, late]  # read twice, kept once


def test_a_version_15_file_gets_blocks_for_its_single_rows_when_upgraded(tmp_path: Path) -> None:
    traffic = RequestTraffic(random.Random(17))
    groups = [traffic.group(later=at > 0) for at in range(4)]
    path = tmp_path / "old.sqlite"
    stored_as_older(path, groups[:2], without_single_blocks, 15)
    singles = single_row_count(str(path))
    assert singles > 0

    def when_upgraded() -> None:
        covered = repository_rows(
            str(path),
            "SELECT count(*) FROM sequences q WHERE q.one_batch IS NOT NULL AND EXISTS ("
            "SELECT 1 FROM single_blocks b WHERE q.rowid BETWEEN b.first_row AND b.last_row)",
        )
        assert covered == [(singles,)]

    upgraded_reads_the_same(
        path, traffic, groups, version=15, reference_layout=True, when_upgraded=when_upgraded
    )

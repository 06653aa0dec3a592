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

from cmr.store import open_store
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
    answers,
    ingest,
    listing_queries,
    stored_as_older,
    upgraded_reads_the_same,
)


def test_many_blocks_list_what_the_side_tables_list(tmp_path: Path) -> None:
    traffic = RequestTraffic(random.Random(16))
    groups = [traffic.group(later=at > 0) for at in range(30)]
    stores = {on: open_store(str(tmp_path / f"layout-{on}.sqlite")) for on in (False, True)}
    try:
        for on, store in stores.items():
            ingest(store, groups, on)
        [(blocks_written,)] = repository_rows(
            str(tmp_path / "layout-True.sqlite"), "SELECT count(*) FROM single_blocks"
        )
        assert blocks_written == len(groups)  # a block a group
        seqs = sorted(traffic.seqs)
        queries = list(listing_queries(stores[False], seqs))
        queries += [
            SequenceQuery(root="app.m2", min_duration_ns=1_000),
            SequenceQuery(root="app.m[13]", sort=SORT_DURATION),
            SequenceQuery(min_duration_ns=2_000, sort=SORT_DURATION, status="error"),
        ]
        assert answers(stores[True], seqs, queries) == answers(stores[False], seqs, queries)
        lines = stores[False].list_sequences(10_000)
        middle = sorted(line.start_ns for line in lines)[len(lines) // 2]
        assert [
            store.find_sequences("app.m2", since_ns=middle, limit=limit)
            for store in stores.values()
            for limit in (3, 1_000)
        ] == [
            stores[False].find_sequences("app.m2", since_ns=middle, limit=limit)
            for limit in (3, 1_000)
        ] * 2
        assert stores[True].prune(middle) == stores[False].prune(middle)
        assert answers(stores[True], seqs, queries) == answers(stores[False], seqs, queries)
        kept = "SELECT puid, batch_no FROM batches ORDER BY 1, 2"  # what prune left
        assert repository_rows(str(tmp_path / "layout-True.sqlite"), kept) == repository_rows(
            str(tmp_path / "layout-False.sqlite"), kept
        )
    finally:
        for store in stores.values():
            store.close()


def test_a_page_for_a_rare_root_reads_only_the_blocks_holding_it(tmp_path: Path) -> None:
    path = str(tmp_path / "cmr.sqlite")
    store = open_store(path, clock=FakeClock())
    rare_in = {3, 11}
    try:
        for group in range(20):  # 20 groups of 50 requests; root method 7 in two of them
            events: list[wire.Event] = []
            for at in range(50):
                iid, t_ns = group * 100 + at + 1, (group * 100 + at) * 1_000
                method = 7 if group in rare_in and at == 0 else 1 + at % 3
                events += [start(iid, t_ns, random.randbytes(16), method=method)]
                events.append(wire.End(iid, t_ns + 500))
            store.ingest_many([make_batch(1, group + 1, {1: events})], CLOCK_OFFSET_NS + group)
    finally:
        store.close()
    assert single_row_count(path) == 1_000

    rare, rare_reads = _picked_by_blocks(path, SequenceQuery(root="app.m7"), 20)
    assert len(rare) == len(rare_in)
    assert rare_reads == len(rare_in)
    # A common root fills the page from the latest blocks and reads no more.
    common, common_reads = _picked_by_blocks(path, SequenceQuery(root="app.m1"), 20)
    assert len(common) == 20
    assert common_reads <= 2


def _picked_by_blocks(
    path: str, query: SequenceQuery, size: int
) -> tuple[list[blocks.Picked], int]:
    """The first page of single rows ``query`` picks by blocks, and how many blocks it read."""
    conn = sqlite3.connect(path)
    try:
        found = plan(query, SQLITE, lambda sql, params: conn.execute(sql, params).fetchall())
        reads: list[str] = []
        conn.set_trace_callback(reads.append)
        picked = blocks.page(conn, NEWEST, FIRST_KEY, size, query=query, plan=found)
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

"""PostgreSQL's single rows listed by their blocks (``cmr.store.postgres.blocks``, migration 11):
the start, root and duration indexes hold no single row, and a listing, a search by method and
``prune`` read the single rows by their batches' blocks. Across many blocks every answer is what
the side tables give, whatever the query, sort and page size, before and after a prune; a query
for a rare root reads the blocks holding it and no other; a repository of migration 10 gets
blocks for the single rows it holds and then reads as a new one."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from contextlib import ExitStack

import psycopg
import pytest

from cmr.store import block_pages, open_store
from cmr.store.base import SequenceQuery, Store
from cmr.store.listing import FIRST_KEY, NEWEST
from cmr.store.listing_sql import POSTGRES, plan
from cmr.store.postgres import blocks
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import (
    postgres_without_single_blocks,
    repository_rows,
    single_row_count,
)
from tests.cmr.store.request_traffic import (
    RequestTraffic,
    answers,
    blocks_read_as_side_tables,
    ingest,
    listing_queries,
    rare_root_reads_its_blocks,
)
from tests.requirements import postgres_database

pytestmark = pytest.mark.postgres

#: The blocks of the single rows (a batch's), and the single rows no block holds.
_BLOCKS = "SELECT count(*) FROM single_blocks"
_UNLISTED = (
    "SELECT count(*) FROM sequences q WHERE q.one_batch IS NOT NULL AND NOT EXISTS ("
    "SELECT 1 FROM single_blocks b WHERE b.puid = q.one_puid AND b.batch_no = q.one_batch)"
)
_BATCHES_WITH_SINGLES = (
    "SELECT count(*) FROM (SELECT DISTINCT one_puid, one_batch FROM sequences "
    "WHERE one_batch IS NOT NULL) AS b"
)


@pytest.fixture(name="urls")
def fixture_urls() -> Iterator[dict[bool, str]]:
    """Two repositories: single rows off (the side tables: the reference) and on."""
    with ExitStack() as stack:
        yield {on: stack.enter_context(postgres_database()) for on in (False, True)}


def test_many_blocks_list_what_the_side_tables_list(urls: dict[bool, str]) -> None:
    def check_blocks() -> None:  # a block a batch with single rows, none left without them
        assert repository_rows(urls[True], _UNLISTED) == [(0,)]
        [(written,)] = repository_rows(urls[True], _BLOCKS)
        assert written >= 30
        assert [(written,)] == repository_rows(urls[True], _BATCHES_WITH_SINGLES)

    blocks_read_as_side_tables(urls, check_blocks)


def test_a_page_for_a_rare_root_reads_only_the_blocks_holding_it(pg_url: str) -> None:
    rare_root_reads_its_blocks(pg_url, _picked_by_blocks)


def _picked_by_blocks(
    url: str, query: SequenceQuery, size: int
) -> tuple[list[block_pages.Picked], int]:
    """The first page of single rows ``query`` picks by blocks, and how many blocks it read."""
    reads: list[str] = []
    with psycopg.connect(url) as conn:

        def execute(sql: str, params: Mapping[str, object]) -> psycopg.Cursor[tuple[object, ...]]:
            reads.append(sql)
            return conn.execute(sql, params)  # type: ignore[arg-type]

        found = plan(query, POSTGRES, lambda sql, params: execute(sql, params).fetchall())
        picked = block_pages.page(
            execute, blocks.LAYOUT, NEWEST, FIRST_KEY, size, query=query, plan=found
        )
    return picked, len([sql for sql in reads if blocks.LAYOUT.rows_of_block in sql])


def test_a_migration_10_repository_gets_blocks_for_its_single_rows_when_upgraded(
    urls: dict[bool, str],
) -> None:
    traffic = RequestTraffic(random.Random(17))
    groups = [traffic.group(later=at > 0) for at in range(4)]
    old = open_store(urls[True], clock=FakeClock())
    try:
        ingest(old, groups[:2], True)
    finally:
        old.close()
    postgres_without_single_blocks(urls[True])
    singles = single_row_count(urls[True])
    assert singles > 0
    assert repository_rows(urls[True], "SELECT max(version) FROM schema_migrations") == [(10,)]

    upgraded = open_store(urls[True], clock=FakeClock())  # a writer upgrades
    reference = open_store(urls[False], clock=FakeClock())
    stores: dict[bool, Store] = {True: upgraded, False: reference}
    try:
        assert repository_rows(urls[True], _UNLISTED) == [(0,)]
        assert single_row_count(urls[True]) == singles
        ingest(upgraded, groups[2:], True, first=len(groups[:2]))
        ingest(reference, groups, True)
        seqs = sorted(traffic.seqs)
        queries = list(listing_queries(reference, seqs))
        assert answers(stores[True], seqs, queries) == answers(stores[False], seqs, queries)
    finally:
        for store in stores.values():
            store.close()

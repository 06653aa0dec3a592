"""How SQLite reads a repository, by its query plans: a sequence's batches by index, in key order
without sorting their blobs; a listing line by index whatever the size of its sequence; each
listing query by its own index, never scanning the table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cmr.store import open_store
from cmr.store.base import SequenceQuery
from cmr.store.listing import NEWEST
from cmr.store.listing_sql import SQLITE, Plan, picked
from cmr.store.sqlite.statements import (
    METHODS_BY_RECENT_SEQUENCE,
    OPEN_CALL,
    REMOTE_ENTRIES,
    SEQUENCE_BATCHES,
    SUMMARIES_OF_PICKED,
    THREAD_COUNTS,
)
from tests.cmr.store.records import INDEXED_QUERIES, S, page_statements


@pytest.mark.parametrize("query", [SEQUENCE_BATCHES, METHODS_BY_RECENT_SEQUENCE])
def test_reading_a_sequence_looks_up_its_batches_by_index_and_never_scans_a_table(
    tmp_path: Path, query: str
) -> None:
    # `cmr show` and `cmr ls` read a sequence's batches: the cost must not grow with the
    # repository, only with the sequence.
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    params = {"since": 0} if query == METHODS_BY_RECENT_SEQUENCE else {"seq": S}
    with sqlite3.connect(path) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params)]
    conn.close()

    assert plan
    assert not [step for step in plan if step.startswith("SCAN")], plan


def test_a_sequences_batches_are_read_in_key_order_without_sorting_their_blobs(
    tmp_path: Path,
) -> None:
    # The batches come out of the primary keys in (puid, batch_no) order already; a sort of the
    # rows would copy every blob of a big sequence through a temporary b-tree (a file, once it
    # outgrows the cache): 49 MB written and read back for `cmr show` of a million calls.
    # A single row's arm (at most one row, one batch: found by the unique index on the id) may
    # be sorted; the side tables' arm, where a big sequence's batches are, may not.
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    with sqlite3.connect(path) as conn:
        plan = list(conn.execute(f"EXPLAIN QUERY PLAN {SEQUENCE_BATCHES}", {"seq": S}))
    conn.close()
    arms = {node for node, parent, _, _ in plan if parent == plan[0][0]}  # LEFT, RIGHT
    steps = {arm: " | ".join(d for _, parent, _, d in plan if parent == arm) for arm in arms}
    side_tables = [arm for arm in arms if "batch_seqs" in steps[arm]]
    single_row = [arm for arm in arms if "sequences_by_seq" in steps[arm]]

    assert side_tables, plan
    assert not [d for _, parent, _, d in plan if parent == 0 and "TEMP B-TREE" in d], plan
    assert "TEMP B-TREE" not in steps[side_tables[0]], plan
    assert all("TEMP B-TREE" not in steps[arm] for arm in arms - {*single_row}), plan


RECENT_SUMMARIES = SUMMARIES_OF_PICKED.format(
    picked=picked(NEWEST, None, Plan(None, few_durations=False), SQLITE)[0]
)


@pytest.mark.parametrize("query", [RECENT_SUMMARIES, THREAD_COUNTS, REMOTE_ENTRIES, OPEN_CALL])
def test_a_listing_line_is_read_by_index_whatever_the_size_of_its_sequence(
    tmp_path: Path, query: str
) -> None:
    # `cmr ls` must not grow with the sequences it lists: the only scan allowed is the walk down
    # the start-time index that LIMIT stops.
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    page = {
        "limit": 5,
        "start": 2**62,
        "seq": b"\xff" * 17,
        "since": 0,
        "until": 2**62,
        "host": "h",
    }
    params = (
        page
        if query == RECENT_SUMMARIES
        else {"puid": 1, "iid": 2, "seq": S}
        if query == OPEN_CALL
        else (S, 1, 2)[: query.count("?") or 3]
    )
    with sqlite3.connect(path) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params)]
    conn.close()

    # (b0, b1: the two arms of a page newest first, each read by index: decided and undecided)
    allowed = {"SCAN sequences USING INDEX sequences_by_start", "SCAN s", "SCAN CONSTANT ROW"}
    allowed |= {"SCAN b0", "SCAN b1"}
    assert plan
    assert not [step for step in plan if step.startswith("SCAN") and step not in allowed], plan


@pytest.mark.parametrize(("query", "index"), INDEXED_QUERIES)
def test_each_listing_query_is_served_by_its_index(
    tmp_path: Path, query: SequenceQuery, index: str
) -> None:
    # Every page a query reads searches an index (the start, the root name, the duration or
    # the errors), never the table; the field the query asks for has its own.
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    plans: list[list[str]] = []
    with sqlite3.connect(path) as conn:
        for sql, params in page_statements(query, SQLITE):
            plans.append([row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)])
    conn.close()

    reads = [step for plan in plans for step in plan if " sequences " in f"{step} "]
    assert reads
    assert all("USING INDEX" in step or "USING PRIMARY KEY" in step for step in reads), plans
    assert [step for plan in plans for step in plan if index in step], plans
    if query.status == "complete":  # the row's own end decides: no lookup per row
        assert not [step for plan in plans for step in plan if "open_calls" in step], plans

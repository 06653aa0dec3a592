"""SQLite's ``sequences`` appended to (schema 15): a rowid table found by id through a unique
index, its duration index by band. A file as version 14 wrote it (keyed by the id) is rebuilt when
opened for writing: every row kept as it was, the answers those of a file that was always
appended to; and new sequences go at the table's end."""

from __future__ import annotations

import random
from pathlib import Path

from cmr.store import open_store
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import keyed_by_seq, repository_rows
from tests.cmr.store.request_traffic import (
    RequestTraffic,
    ingest,
    stored_as_older,
    upgraded_reads_the_same,
)

ROWS = "SELECT * FROM sequences ORDER BY seq"


def _schema(path: Path) -> dict[str, str]:
    query = "SELECT name, sql FROM sqlite_schema WHERE tbl_name = 'sequences'"
    return {str(name): str(sql) for name, sql in repository_rows(str(path), query)}


def test_a_version_14_file_is_rebuilt_appended_to_and_reads_the_same(tmp_path: Path) -> None:
    traffic = RequestTraffic(random.Random(15))
    groups = [traffic.group(later=at > 0) for at in range(4)]
    path = tmp_path / "old.sqlite"
    stored_as_older(path, groups[:2], keyed_by_seq, 14)
    assert "WITHOUT ROWID" in _schema(path)["sequences"]
    stored = repository_rows(str(path), ROWS)

    def when_upgraded() -> None:
        assert repository_rows(str(path), ROWS) == stored
        assert _schema(path) == _schema(tmp_path / "reference.sqlite")
        assert "WITHOUT ROWID" not in _schema(path)["sequences"]

    upgraded_reads_the_same(
        path, traffic, groups, version=14, reference_layout=True, when_upgraded=when_upgraded
    )


def test_new_sequences_go_at_the_end_of_the_table_in_the_order_they_are_stored(
    tmp_path: Path,
) -> None:
    traffic = RequestTraffic(random.Random(16))
    groups = [traffic.group(later=False) for _ in range(3)]
    path = tmp_path / "cmr.sqlite"
    store = open_store(str(path), clock=FakeClock())
    try:
        ingest(store, groups, True)
    finally:
        store.close()

    rows = repository_rows(str(path), "SELECT seq FROM sequences ORDER BY rowid")
    in_table = [seq for (seq,) in rows if isinstance(seq, bytes)]
    assert len(in_table) > 50
    assert in_table != sorted(in_table)  # not kept in the random ids' order
    first_group = {seq for batch in groups[0] for seq in _seqs_of(batch)} & set(in_table)
    assert first_group
    assert set(in_table[: len(first_group)]) == first_group


def _seqs_of(batch: wire.Batch) -> set[bytes]:
    return {
        event.seq
        for chunk in batch.chunks
        for event in chunk.events
        if isinstance(event, wire.Start) and event.seq is not None
    }

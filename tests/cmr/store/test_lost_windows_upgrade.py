"""A repository written before windows of unnamed drops were kept (SQLite version 11,
PostgreSQL migration 7) opens: a writer adds the table and keeps what was stored; a SQLite reader
asks for the upgrade first, as for every older version."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from cmr.store import Store, StoreError, open_store
from cmr.store.postgres.connect import connect
from cmr.store.postgres.migrate import SCHEMA_VERSION as PG_VERSION
from cmr.store.sqlite.schema import SCHEMA_VERSION
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import (
    postgres_without_single_rows,
    seq_id,
    start,
    user_version,
    without_single_rows,
)

BatchFactory = Callable[..., wire.Batch]
BEFORE = seq_id("10")
DURING = seq_id("20")


def store_one(store: Store, make_batch: BatchFactory) -> None:
    events = [start(1, 100, BEFORE), wire.End(1, 200), start(2, 300, DURING), wire.End(2, 400)]
    store.ingest(make_batch(7, 1, {1: events}), 1)


def check_upgraded(store: Store, make_batch: BatchFactory) -> None:
    """What was stored is there, and a window stored now marks the sequence it overlaps."""
    assert {s.seq: s.lossy for s in store.list_sequences(10)} == {BEFORE: False, DURING: False}
    store.ingest(make_batch(7, 2, {}, lost_windows=[(250, 500)]), 2)
    assert {s.seq: s.lossy for s in store.list_sequences(10)} == {BEFORE: False, DURING: True}


def test_a_version_11_sqlite_file_gets_the_windows_table_when_opened_for_writing(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    store = open_store(path, clock=clock)
    store_one(store, make_batch)
    store.close()
    with sqlite3.connect(path) as conn:  # as version 11 wrote it
        without_single_rows(conn)
        conn.execute("DROP TABLE lost_windows")
        conn.execute("PRAGMA user_version = 11")
    conn.close()

    with pytest.raises(StoreError, match=r"schema version 11, older than .* upgrade it"):
        open_store(path, readonly=True)
    store = open_store(path, clock=clock)
    try:
        check_upgraded(store, make_batch)
    finally:
        store.close()
    assert user_version(path) == SCHEMA_VERSION >= 12


@pytest.mark.postgres
def test_a_postgres_repository_at_migration_7_gets_the_windows_table(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    store = open_store(pg_url, clock=clock)
    store_one(store, make_batch)
    store.close()
    postgres_without_single_rows(pg_url)
    with connect(pg_url) as conn:  # as migration 7 left it
        conn.execute(
            "DROP TABLE lost_windows; ALTER TABLE samplers DROP COLUMN dropped_samples; "
            "DELETE FROM schema_migrations WHERE version >= 8"
        )
        conn.commit()

    store = open_store(pg_url, clock=clock)
    try:
        check_upgraded(store, make_batch)
    finally:
        store.close()
    assert PG_VERSION >= 8

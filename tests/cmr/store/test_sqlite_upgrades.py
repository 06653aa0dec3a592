"""SQLite files of other schema versions: an older one is upgraded in place when opened for
writing, keeping what it stored (calls and late ends, listing lines and keys, sampler reports,
the methods its sequences ran), and is not read before; a newer one is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cmr.store import StoreError, open_store
from cmr.store.sqlite.schema import PACKED_SCHEMA, SCHEMA_VERSION
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import (
    HANDED,
    OTHER,
    RAN,
    BatchFactory,
    H,
    S,
    check_keys_computed_on_upgrade,
    check_methods_kept_on_upgrade,
    check_sampler_drops_kept_on_upgrade,
    check_sampler_reports_kept_on_upgrade,
    handoff,
    older_schema,
    seq_id,
    start,
    user_version,
    without_sampler_drops,
    without_single_rows,
)


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()

    with pytest.raises(StoreError, match=r"schema version 99, newer than .* upgrade invoseq"):
        open_store(path)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_an_older_repository_is_upgraded_in_place_when_opened_for_writing(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock, version: int
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    older_schema(path, version)

    store = open_store(path, clock=clock)
    try:
        # What was stored before survives, and its processes promised no heartbeat.
        (old,) = store.load_sequence(S).processes.values()
        assert (old.host, old.last_seen_ns, old.heartbeat_ms, old.state) == ("old", 123, 0, "alive")
        assert store.list_sequences(1)[0].status == "running"

        other = seq_id("07e")
        events = [start(1, 100, other), handoff(H, 1, 110, other)]
        store.ingest(make_batch(8, 1, {1: events}, heartbeat_ms=250, lost_seqs=[S]), 1)
        assert list(store.load_sequence(other).handoffs) == [H]
        assert store.load_sequence(other).processes[8].heartbeat_ms == 250
        assert store.load_sequence(S).lost_by == {8}
        assert [s.lossy for s in store.list_sequences(2)] == [False, True]
    finally:
        store.close()
    assert user_version(path) == SCHEMA_VERSION


def test_a_version_7_file_gets_the_exception_its_roots_raised_when_upgraded(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    raised, fine = seq_id("e77"), seq_id("0c")
    events = [start(1, 100, raised), wire.Error(1, 200, "ValueError")]
    events += [start(2, 300, fine), wire.End(2, 400)]
    store = open_store(path, clock=clock)
    try:
        store.ingest(make_batch(7, 1, {1: events}), 1)
    finally:
        store.close()
    with sqlite3.connect(path) as conn:  # as version 7 wrote it
        _drop_listing_keys(conn)
        conn.execute("ALTER TABLE seq_roots DROP COLUMN error")
        conn.execute("PRAGMA user_version = 7")

    store = open_store(path, clock=clock)
    try:
        lines = {line.seq: line for line in store.list_sequences(10)}
    finally:
        store.close()

    assert user_version(path) == SCHEMA_VERSION
    assert (lines[raised].error, lines[fine].error) == ("ValueError", None)
    assert (lines[raised].invocations, lines[raised].status) == (1, "complete")


def _drop_listing_keys(conn: sqlite3.Connection) -> None:
    """Make a file's sequences as version 8 wrote them: without their listing keys (and its
    sampler reports without the paced interval of version 10)."""
    without_single_rows(conn)
    for index in ("sequences_by_root", "sequences_by_duration", "sequences_failed"):
        conn.execute(f"DROP INDEX {index}")
    for column in ("root_name", "end_ns", "error"):
        conn.execute(f"ALTER TABLE sequences DROP COLUMN {column}")
    _drop_sampler_intervals(conn)


def _drop_sampler_intervals(conn: sqlite3.Connection) -> None:
    """Make a file's sampler reports as version 9 wrote them: without the paced interval (and
    its methods index as version 10 kept it)."""
    for column in ("current_interval_ns", "longest_interval_ns"):
        conn.execute(f"ALTER TABLE samplers DROP COLUMN {column}")
    _split_batch_methods(conn)


def _split_batch_methods(conn: sqlite3.Connection) -> None:
    """Make a file's index as version 10 wrote it: the methods each sequence ran in a batch in a
    table of their own, ``seq_methods`` (and no sequence as a single row: version 13's)."""
    without_single_rows(conn)
    [create] = [s for s in PACKED_SCHEMA if s.startswith("CREATE TABLE seq_methods")]
    conn.execute(create)
    conn.execute(
        "INSERT INTO seq_methods SELECT seq, puid, batch_no, methods FROM batch_seqs "
        "WHERE methods IS NOT NULL"
    )
    conn.execute("ALTER TABLE batch_seqs DROP COLUMN methods")


def test_a_version_10_file_keeps_the_methods_its_sequences_ran_when_upgraded(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")

    def downgrade() -> None:
        with sqlite3.connect(path) as conn:  # as version 10 wrote it
            _split_batch_methods(conn)
            conn.execute("PRAGMA user_version = 10")
        conn.close()

    check_methods_kept_on_upgrade(lambda: open_store(path, clock=clock), make_batch, downgrade)
    assert user_version(path) == SCHEMA_VERSION
    with sqlite3.connect(path) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        index = conn.execute("SELECT seq, methods IS NULL FROM batch_seqs ORDER BY seq").fetchall()
    conn.close()
    assert "seq_methods" not in tables
    assert index == [(RAN, 0), (OTHER, 0), (HANDED, 1)]  # the hand-off's sequence ran nothing


def test_a_version_8_file_gets_its_listing_keys_when_upgraded_and_queries_find_its_sequences(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")

    def downgrade() -> None:
        with sqlite3.connect(path) as conn:
            _drop_listing_keys(conn)
            conn.execute("PRAGMA user_version = 8")
        conn.close()

    check_keys_computed_on_upgrade(lambda: open_store(path, clock=clock), make_batch, downgrade)
    assert user_version(path) == SCHEMA_VERSION


#: Sampler reports stored before a version added to them: (the version before, how a file is
#: made as it wrote them, what the upgrade must keep and read).
SAMPLER_UPGRADES = {
    "paced interval": (
        9,
        _drop_sampler_intervals,
        check_sampler_reports_kept_on_upgrade,
    ),
    "samples dropped": (13, without_sampler_drops, check_sampler_drops_kept_on_upgrade),
}


@pytest.mark.parametrize("added", list(SAMPLER_UPGRADES))
def test_an_older_file_keeps_its_sampler_reports_when_upgraded(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock, added: str
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    version, made_older, check = SAMPLER_UPGRADES[added]

    def downgrade() -> None:
        with sqlite3.connect(path) as conn:  # as that version wrote it
            made_older(conn)
            conn.execute(f"PRAGMA user_version = {version}")
        conn.close()

    check(lambda: open_store(path, clock=clock), make_batch, downgrade)
    assert user_version(path) == SCHEMA_VERSION


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_an_older_repository_is_not_read_before_it_is_upgraded(
    tmp_path: Path, version: int
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    older_schema(path, version)

    with pytest.raises(
        StoreError,
        match=rf"schema version {version}, older than .* \({SCHEMA_VERSION}\): run `cmr serve`",
    ):
        open_store(path, readonly=True)
    assert user_version(path) == version


def test_a_version_6_repository_gets_the_listing_lines_its_batches_give(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    other = seq_id("07e")
    batches = [
        make_batch(7, 1, {1: [start(1, 100, S), start(2, 110, S, parent=1), wire.End(2, 120)]}),
        make_batch(7, 2, {2: [start(3, 130, other, hid=H), wire.End(1, 200)]}),
    ]
    store = open_store(path, clock=clock)
    try:
        for at, batch in enumerate(batches, start=1):
            store.ingest(batch, at)
        expected = store.list_sequences(10)
    finally:
        store.close()
    with sqlite3.connect(path) as conn:  # back to what version 6 wrote: no listing lines
        _drop_listing_keys(conn)
        for table in ("seq_roots", "seq_threads", "seq_entries", "open_calls"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("ALTER TABLE sequences DROP COLUMN invocations")
        conn.execute("PRAGMA user_version = 6")
    conn.close()

    store = open_store(path, clock=clock)
    try:
        assert store.list_sequences(10) == expected
        assert [(s.invocations, s.status) for s in expected] == [(1, "running"), (2, "complete")]
    finally:
        store.close()
    assert user_version(path) == SCHEMA_VERSION


def test_an_upgrade_moves_every_stored_call_and_late_end(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock, clock_offset_ns: int
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    older_schema(path, 5)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO starts VALUES (7, 2, ?, 1, 0, 2, 1, 150)", (S,))
        conn.execute("INSERT INTO ends VALUES (7, 2, 170, 'KeyError')")
        conn.execute("INSERT INTO ends VALUES (7, 3, 190, NULL)")  # its Start never arrived
    conn.close()

    store = open_store(path, clock=clock)
    try:
        # The End of iid 3 is kept: its Start may still come, from the same process.
        store.ingest(make_batch(7, 1, {1: [start(3, 180 - clock_offset_ns, S, parent=1)]}), 1)
        records = store.load_sequence(S).invocations
    finally:
        store.close()
    assert [(r.iid, r.parent, r.tid, r.start_ns, r.end_ns, r.error) for r in records] == [
        (1, 0, 1, 100, None, None),
        (2, 1, 2, 150, 170, "KeyError"),
        (3, 1, 1, 180, 190, None),
    ]
    with sqlite3.connect(path) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert not tables & {"starts", "ends"}

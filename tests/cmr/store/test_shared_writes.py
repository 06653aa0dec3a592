"""A writer that shares its SQLite file (``cmr serve --workers``) stages its single rows before
its write turn and has a thread copy the WAL into the file outside it
(``cmr.store.sqlite.checkpoints``): what it stores reads exactly as an unshared writer's; the
thread copies the WAL once enough of it waits, leaves a little alone, never troubles the writers
when it fails, and is gone when the store closes. Real files, real threads."""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from cmr.store import open_store
from cmr.store.sqlite import checkpoints
from cmr.store.sqlite.checkpoints import Checkpointer
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock
from tests.cmr.store.records import repository_rows, single_row_count
from tests.cmr.store.request_traffic import RequestTraffic, answers, ingest, listing_queries
from tests.cmr.store.wal import COPIED_BYTES, big_batches, wal_frames

PATIENCE_S = 60.0
THREAD = "invoseq-checkpoints"


def _checkpointers() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == THREAD]


def test_a_shared_writers_request_traffic_reads_and_is_laid_out_as_an_unshared_writers(
    tmp_path: Path,
) -> None:
    traffic = RequestTraffic(random.Random(57))
    groups = [traffic.group(later=at > 0) for at in range(5)]
    groups.append([*groups[1][:2], *traffic.group(later=True)])  # two batches sent again
    paths = {shared: str(tmp_path / f"shared-{shared}.sqlite") for shared in (False, True)}
    stores = {}
    for shared, path in paths.items():
        stores[shared] = store = open_store(path, clock=FakeClock())
        if shared:
            store.share_writes()
        ingest(store, groups, True)
    try:
        assert single_row_count(paths[True]) > len(traffic.seqs) // 2
        seqs = sorted(traffic.seqs)
        queries = list(listing_queries(stores[False], seqs))
        assert answers(stores[True], seqs, queries) == answers(stores[False], seqs, queries)
        for table in ("sequences", "single_blocks", "single_block_roots", "batch_seqs"):
            laid_out = f"SELECT rowid, * FROM {table} ORDER BY 1"  # the same rowids: blocks
            if table in ("single_block_roots", "batch_seqs"):
                laid_out = f"SELECT * FROM {table} ORDER BY 1, 2, 3"
            assert repository_rows(paths[True], laid_out) == repository_rows(
                paths[False], laid_out
            ), table
    finally:
        for store in stores.values():
            store.close()
    assert _checkpointers() == []  # the shared store's thread ended with it


def _wal_writer(path: Path) -> sqlite3.Connection:
    """A connection writing ``path`` in WAL mode that never checkpoints on its own."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x BLOB)")
    return conn


def _write_pages(conn: sqlite3.Connection, pages: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO t VALUES (randomblob(4000))", [()] * pages)
    conn.execute("COMMIT")


def test_the_thread_copies_the_wal_once_enough_waits_and_leaves_less_alone(
    tmp_path: Path,
) -> None:
    writer = _wal_writer(tmp_path / "cmr.sqlite")
    copier = Checkpointer(str(tmp_path / "cmr.sqlite"), 1_000, ahead=64)
    try:
        _write_pages(writer, 16)
        few = copier.waiting()
        assert few is not None
        assert 16 <= few < 64
        assert copier.pass_once() is False  # too few to be worth a checkpoint
        assert copier.waiting() == few

        _write_pages(writer, 80)
        assert (copier.waiting() or 0) >= 64
        copier.committed()  # as a writer does after each commit: the thread copies them
        deadline = time.monotonic() + PATIENCE_S
        while copier.waiting() != 0:
            assert time.monotonic() < deadline, "the thread never copied the WAL"
            time.sleep(0.01)
        [(_busy, frames, copied)] = writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        assert frames == copied > 64  # every frame was in the file already
    finally:
        copier.close()
        writer.close()
    assert _checkpointers() == []


def _assert_the_next_write_starts_the_wal_over(
    writer: sqlite3.Connection, copier: Checkpointer
) -> None:
    _write_pages(writer, 1)
    counts = copier.frames()
    assert counts is not None
    assert counts[0] < 16  # the commit's frames alone


def test_once_the_wal_is_half_full_every_commit_is_copied_and_the_wal_starts_over(
    tmp_path: Path,
) -> None:
    """The WAL starts over only at a write after a checkpoint copied all of it. Past
    ``restart_from`` frames the thread copies each commit, however little waits, so that a busy
    writer's WAL starts over in a gap between commits instead of growing to the commit that runs
    the automatic checkpoint (0.1-0.26 s, while acknowledgements wait)."""
    path = tmp_path / "cmr.sqlite"
    writer = _wal_writer(path)
    copier = Checkpointer(str(path), 1_000, ahead=1_000, restart_from=160)
    try:
        while (counts := copier.frames()) is None or counts[0] < 160:
            assert copier.pass_once() is False  # fewer than ``ahead`` wait, not half full
            _write_pages(writer, 8)
        assert counts[0] - counts[1] < 1_000
        assert copier.pass_once() is True  # half full: copied however few wait
        assert copier.waiting() == 0
        _assert_the_next_write_starts_the_wal_over(writer, copier)
    finally:
        copier.close()
        writer.close()
    assert _checkpointers() == []


def test_a_wal_past_give_way_at_is_left_to_the_writers_automatic_checkpoint(
    tmp_path: Path,
) -> None:
    """A writer that never pauses long enough for a copy to finish between its commits would find
    the thread's copy under way at each automatic checkpoint, which then returns at once, and its
    WAL would grow without bound: past ``give_way_at`` frames the thread copies nothing."""
    path = tmp_path / "cmr.sqlite"
    writer = _wal_writer(path)
    copier = Checkpointer(str(path), 1_000, ahead=64, restart_from=64, give_way_at=200)
    try:
        _write_pages(writer, 240)
        counts = copier.frames()
        assert counts is not None
        assert counts[0] >= 200
        assert copier.pass_once() is False
        assert copier.frames() == counts
        [(_busy, frames, copied)] = writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        assert frames == copied == counts[0]  # the writer's checkpoint had all of it to copy
        _assert_the_next_write_starts_the_wal_over(writer, copier)
    finally:
        copier.close()
        writer.close()
    assert _checkpointers() == []


def test_a_checkpoint_that_fails_is_logged_once_and_the_writers_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cmr.sqlite"
    writer = _wal_writer(path)
    _write_pages(writer, 8)
    copier = Checkpointer(str(path), 1_000, ahead=1)
    try:
        # SQLite refuses the thread's checkpoint, as it would for a full disk or a broken file
        copier._conn.set_authorizer(lambda *_: sqlite3.SQLITE_DENY)
        with caplog.at_level(logging.WARNING, logger=checkpoints.__name__):
            assert copier.pass_once() is False
            _write_pages(writer, 8)  # the writer goes on
            assert copier.pass_once() is False
        assert caplog.text.count("checkpoints of") == 1
        assert "left to the writers" in caplog.text
        assert writer.execute("SELECT count(*) FROM t").fetchone() == (16,)
        copier._conn.set_authorizer(None)
        assert copier.pass_once() is True
        assert copier.waiting() == 0
    finally:
        copier.close()
        writer.close()


def test_a_checkpointer_that_cannot_open_the_file_leaves_the_writers_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "cmr.sqlite").mkdir()  # no database can be opened there
    with caplog.at_level(logging.WARNING, logger=checkpoints.__name__):
        assert Checkpointer.beside(str(tmp_path / "cmr.sqlite"), 1_000) is None
    assert "left to the writers" in caplog.text
    assert _checkpointers() == []


@pytest.mark.parametrize("served", [False, True])
def test_a_served_store_copies_its_wal_into_the_file_beside_the_commits(
    tmp_path: Path, served: bool
) -> None:
    """`cmr serve` writing alone: the WAL is copied on a thread, not in the commit that takes it
    past ``wal_autocheckpoint`` (a whole checkpoint, hundreds of ms while acknowledgements wait).
    Written without it, the same WAL waits for that commit."""
    path = tmp_path / "cmr.sqlite"
    store = open_store(str(path), clock=FakeClock())
    try:
        if served:
            store.serving()
            store.serving()  # once is enough: still one thread
            assert len(_checkpointers()) == 1
        for batch in big_batches(1, 6):  # more than AHEAD frames, fewer than the automatic
            assert store.ingest_many([batch], CLOCK_OFFSET_NS) == [True]
        frames, _copied = wal_frames(path)
        assert frames < 8192  # short of wal_autocheckpoint: no commit copied any of it
        # The file's size says what was copied (the WAL may have started over since).
        deadline = time.monotonic() + PATIENCE_S
        while served and path.stat().st_size < COPIED_BYTES:
            assert time.monotonic() < deadline, "the thread never copied the WAL"
            time.sleep(0.01)
        assert (path.stat().st_size >= COPIED_BYTES) is served
        assert store.stats().events == 6 * 80_000
    finally:
        store.close()
    assert _checkpointers() == []

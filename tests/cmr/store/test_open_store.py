"""Opening repositories (``open_store``): a SQLite file keeps what it stored when reopened; a
readonly store reads while a writer has the file open and refuses every write; a missing
repository, a file that is not one, an unreachable PostgreSQL server and an unknown URL scheme
are refused clearly; the default repository's location."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest

from cmr.store import StoreError, default_db_path, open_store
from cmr.store.sqlite.reader import SQLiteReader
from invoseq import wire
from tests.cmr.store.records import BatchFactory, S, start


def test_sqlite_repository_survives_reopening(tmp_path: Path, make_batch: BatchFactory) -> None:
    path = str(tmp_path / "cmr.sqlite")
    batch = make_batch(7, 1, {1: [start(1, 100, S), wire.End(1, 200)]})
    store = open_store(path)
    store.ingest(batch, 1)
    store.record_rejected("garbage")
    before = store.load_sequence(S)
    store.close()

    reopened = open_store(path)
    try:
        assert reopened.load_sequence(S) == before
        assert reopened.ingest(batch, 2) is False  # still knows the batch after a restart
        stats = reopened.stats()
        assert (stats.batches, stats.duplicate_batches, stats.rejected) == (1, 1, {"garbage": 1})
    finally:
        reopened.close()


def test_readonly_store_reads_while_a_writer_has_the_file_open(
    tmp_path: Path, make_batch: BatchFactory
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    writer = open_store(path)
    reader = open_store(path, readonly=True)
    try:
        writer.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), 1)
        assert reader.resolve_sequence("5e") == S
        writer.ingest(make_batch(7, 2, {1: [wire.End(1, 200)]}), 2)
        assert reader.list_sequences(1)[0].status == "complete"
        with pytest.raises(StoreError, match="readonly"):
            reader.record_rejected("garbage")
    finally:
        reader.close()
        writer.close()


def test_a_readonly_store_is_the_read_side_alone_and_refuses_every_write(
    tmp_path: Path, make_batch: BatchFactory
) -> None:
    """``open_store(readonly=True)`` opens a ``SQLiteReader``: the reads, without the ingest
    machinery (``cmr ls`` loads none of it); a write is refused in one line."""
    path = str(tmp_path / "cmr.sqlite")
    writer = open_store(path)
    writer.ingest(make_batch(7, 1, {1: [start(1, 100, S), wire.End(1, 200)]}), 1)
    writer.close()
    reader = open_store(path, readonly=True)
    try:
        assert type(reader) is SQLiteReader
        assert [line.seq for line in reader.list_sequences(5)] == [S]
        assert len(reader.load_sequence(S).invocations) == 1
        refused = f"^the repository {path} is open readonly: nothing is written$"
        with pytest.raises(StoreError, match=refused):
            reader.ingest(make_batch(7, 2, {1: [start(2, 300, S)]}), 2)
        with pytest.raises(StoreError, match=refused):
            reader.record_rejected("garbage")
        with pytest.raises(StoreError, match=refused):
            reader.prune(10**18)
        assert reader.stats().batches == 1
    finally:
        reader.close()


def test_readonly_open_of_a_missing_repository_fails_clearly(tmp_path: Path) -> None:
    path = tmp_path / "none" / "cmr.sqlite"

    with pytest.raises(StoreError, match=r"^no repository at .*cmr\.sqlite \(run `cmr serve`"):
        open_store(str(path), readonly=True)
    assert not path.parent.exists()


def test_a_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "other.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()

    with pytest.raises(StoreError, match="is not an invoseq repository"):
        open_store(path)


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not SQLite\n" * 100)

    with pytest.raises(StoreError, match="is not an invoseq repository"):
        open_store(str(path))


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_an_unreachable_postgresql_server_fails_in_one_line_without_the_password(
    scheme: str,
) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(StoreError) as failure:
        open_store(f"{scheme}://invoseq:s3cret@127.0.0.1:{port}/invoseq")

    message = str(failure.value)
    assert message.startswith(f"cannot connect to postgresql://invoseq@127.0.0.1:{port}/invoseq")
    assert "\n" not in message
    assert "s3cret" not in message


def test_an_unknown_url_scheme_is_refused() -> None:
    with pytest.raises(StoreError, match="unsupported repository 'mysql://db': give a file path"):
        open_store("mysql://db")


def test_default_repository_is_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INVOSEQ_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_db_path() == "./.invoseq/cmr.sqlite"

    open_store().close()

    assert (tmp_path / ".invoseq" / "cmr.sqlite").is_file()


def test_invoseq_db_names_the_default_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "elsewhere.sqlite"
    monkeypatch.setenv("INVOSEQ_DB", str(path))
    assert default_db_path() == str(path)

    open_store().close()

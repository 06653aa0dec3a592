"""The WAL of a repository `cmr serve` writes: copied into the file on a thread once enough of it
waits, beside the commits, and the server's lock on the WAL index kept while another process
reads the repository."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from invoseq import wire
from tests.cmr.server.conftest import (
    SEQ,
    BatchFactory,
    Encode,
    finish,
    request,
    start_server_process,
)
from tests.cmr.store.wal import COPIED_BYTES, big_batches, wal_frames
from tests.support import READY_PREFIX, read_line

pytestmark = pytest.mark.system


#: How long a test waits for what must happen (generous: a loaded CI machine).
PATIENCE_S = 60.0


@contextlib.contextmanager
def serving_process(
    tmp_path: Path, connect: Callable[[str], zmq.Socket[bytes]]
) -> Iterator[tuple[Path, zmq.Socket[bytes]]]:
    """`cmr serve --db` in ``tmp_path`` (the repository file) and a client connected to it;
    stopped with SIGTERM at the end, from which it must exit cleanly."""
    db = tmp_path / "cmr.sqlite"
    bind = f"ipc://{tmp_path}/cmr.sock"
    process = start_server_process("--bind", bind, "--db", str(db))
    try:
        assert read_line(process, 30) == f"{READY_PREFIX}{bind}\n"
        yield db, connect(bind)
        process.send_signal(signal.SIGTERM)
    finally:
        code, out, err = finish(process)
    assert (code, out, err) == (0, "", "")


def test_a_served_repositorys_wal_is_copied_beside_its_commits(
    tmp_path: Path, connect: Callable[[str], zmq.Socket[bytes]], encode_batch: Encode
) -> None:
    """`cmr serve` alone (no --workers, as `tracer run` starts it) copies the WAL into the file on
    a thread once 8 MiB of it waits: left to the commit that takes it past 32 MiB, the copy and
    its syncs stalled every acknowledgement for up to 0.6 s, and a program making a million
    calls a second dropped events meanwhile (docs/performance.md)."""
    with serving_process(tmp_path, connect) as (db, client):
        for batch in big_batches(1, 6):
            assert request(client, encode_batch(batch)) == wire.Ack(1, batch.batch_no)
        frames, _copied = wal_frames(db)
        assert frames < 8192  # short of wal_autocheckpoint: no commit copied any of it
        # The file's size says what was copied (the WAL may have started over since).
        deadline = time.monotonic() + PATIENCE_S
        while db.stat().st_size < COPIED_BYTES:
            assert time.monotonic() < deadline, f"{frames} frames; the file has none"
            time.sleep(0.01)


def test_a_served_repository_keeps_its_lock_on_the_wal_index(
    tmp_path: Path,
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    """`cmr serve` holds its share of SQLite's lock on the WAL index (the "dead man switch" byte
    of `<file>-shm`) while it runs. Its checkpoint thread once read the index through a
    descriptor it opened and closed after every commit, which dropped every POSIX lock the
    process held on it: a reader from another process (`cmr ls` while it writes) then took the
    index for unused and truncated it, and the server died of SIGBUS (seen in CI)."""
    with serving_process(tmp_path, connect) as (db, client):
        for batch_no in range(1, 21):
            batch = make_batch(7, batch_no, {1: [wire.Start(batch_no, 0, 0, 1, 100, SEQ)]})
            assert request(client, encode_batch(batch)) == wire.Ack(7, batch_no)
            assert not _lockable(db.with_name(db.name + "-shm"), WAL_INDEX_DMS), batch_no
            reader = sqlite3.connect(db)  # this process: another one than the server's
            try:
                [(batches,)] = reader.execute("SELECT count(*) FROM batches").fetchall()
            finally:
                reader.close()
            assert batches == batch_no


#: SQLite's "dead man switch" byte in the WAL index (unix VFS): every connection holds a shared
#: lock on it, and one that gets it exclusively takes the index for unused and starts it over.
WAL_INDEX_DMS = 128


def _lockable(path: Path, offset: int) -> bool:
    """Whether this process could lock byte ``offset`` of ``path`` exclusively (released at once):
    no other process holds a lock on it."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
    except OSError:
        return False
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
        return True
    finally:
        os.close(fd)

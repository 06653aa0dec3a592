"""Writers of one SQLite file take turns (``cmr serve --workers``): a shared writer holds its turn
through each write transaction and no longer, waits for a turn held elsewhere in the kernel (not
in SQLite's sleeping busy handler), and writes on SQLite's lock alone when the turn cannot be
had. Real files, real threads."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmr.store import open_store
from cmr.store.base import Store
from cmr.store.sqlite import store as sqlite_store
from cmr.store.sqlite.turns import SUFFIX
from invoseq import wire
from tests.cmr.store.records import BatchFactory, S, start

PATIENCE_S = 60.0


def _batch(make_batch: BatchFactory, batch_no: int) -> wire.Batch:
    return make_batch(
        7,
        batch_no,
        {1: [start(batch_no, 100 * batch_no, S), wire.End(batch_no, 100 * batch_no + 50)]},
    )


def _turn_is_free(path: Path) -> bool:
    """Whether another open of the turn's file could take it now."""
    fd = os.open(str(path) + SUFFIX, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing lets go of a turn this open took
    return True


@pytest.fixture(name="shared")
def fixture_shared(tmp_path: Path) -> Iterator[Store]:
    store = open_store(str(tmp_path / "cmr.sqlite"))
    store.share_writes()
    yield store
    store.close()


def test_a_shared_writer_holds_its_turn_through_its_transaction_and_no_longer(
    shared: Store, tmp_path: Path, make_batch: BatchFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    free_while_writing: list[bool] = []
    write_group = sqlite_store.write_group

    def watched(*args: Any) -> None:
        free_while_writing.append(_turn_is_free(tmp_path / "cmr.sqlite"))
        write_group(*args)

    monkeypatch.setattr(sqlite_store, "write_group", watched)

    assert shared.ingest(_batch(make_batch, 1), 1)

    assert free_while_writing == [False]  # held while it wrote
    assert _turn_is_free(tmp_path / "cmr.sqlite")  # and let go with the commit
    assert shared.stats().batches == 1


def _waits_in_flock(native_id: int) -> bool:
    wchan = Path(f"/proc/self/task/{native_id}/wchan")
    return "lock_inode" in wchan.read_text()


def test_a_writer_waits_for_the_turn_another_holds_then_writes(
    shared: Store, tmp_path: Path, make_batch: BatchFactory
) -> None:
    if not Path(f"/proc/self/task/{threading.get_native_id()}/wchan").exists():
        pytest.skip("no /proc wchan: where a thread waits cannot be seen here")
    holder = os.open(str(tmp_path / "cmr.sqlite") + SUFFIX, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another worker's turn
    outcome: list[bool] = []
    native: list[int] = []

    def write() -> None:
        native.append(threading.get_native_id())
        outcome.append(shared.ingest(_batch(make_batch, 1), 1))

    writer = threading.Thread(target=write)
    try:
        writer.start()
        deadline = time.monotonic() + PATIENCE_S
        while not (native and _waits_in_flock(native[0])):
            assert time.monotonic() < deadline, "the writer never waited for the turn"
            time.sleep(0.01)
        reader = open_store(str(tmp_path / "cmr.sqlite"), readonly=True)
        try:
            assert reader.stats().batches == 0  # it waits before its transaction begins
        finally:
            reader.close()
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
        writer.join(PATIENCE_S)

    assert not writer.is_alive()
    assert outcome == [True]
    assert shared.stats().batches == 1


def test_a_turn_that_cannot_be_had_leaves_the_writer_on_sqlites_lock(
    tmp_path: Path, make_batch: BatchFactory, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / ("cmr.sqlite" + SUFFIX)).mkdir()  # not a file anyone can lock
    store = open_store(str(tmp_path / "cmr.sqlite"))
    try:
        with caplog.at_level(logging.WARNING, logger="cmr.store.sqlite.turns"):
            store.share_writes()
        assert store.ingest(_batch(make_batch, 1), 1)
        assert store.stats().batches == 1
    finally:
        store.close()
    assert "wait on SQLite's lock alone" in caplog.text

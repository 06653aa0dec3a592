"""A SQLite repository's WAL as tests watch it: batches big enough to fill it, and how much of it
the file has (``cmr.store.sqlite.checkpoints``)."""

from __future__ import annotations

from pathlib import Path

from cmr.store.sqlite.checkpoints import wal_index_frames
from invoseq import wire
from tests.cmr.conftest import make_batch

#: Bytes of pages the file holds once a checkpoint copied the WAL of ``big_batches(_, 6)`` (about
#: 2,400 pages of 4 KiB); before, it holds its first page alone.
COPIED_BYTES = 4 * 1024 * 1024


def wal_frames(path: Path) -> tuple[int, int]:
    """Frames in the WAL of ``path`` and how many of them are in the file already, read from
    the WAL index's header as the checkpoint thread reads it. Reading opens and closes the
    index, which drops this process's POSIX locks on it (``cmr.store.sqlite.checkpoints``):
    harmless where no other process opens the repository meanwhile, as in these tests."""
    counts = wal_index_frames((path.parent / (path.name + "-shm")).read_bytes()[:100])
    assert counts is not None, f"{path}: no WAL index"
    return counts


def big_batches(batch_no: int, count: int) -> list[wire.Batch]:
    """``count`` batches of 40,000 calls each (a few MiB of pages between them)."""
    batches = []
    for at in range(count):
        seq = bytes([at + 1]) * 16
        base = at * 1_000_000
        events: list[wire.Event] = []
        for iid in range(base + 1, base + 40_001):
            events.append(wire.Start(iid, base + 1 if iid > base + 1 else 0, 0, 7, iid * 10, seq))
            events.append(wire.End(iid, iid * 10 + 5))
        batches.append(make_batch(1, batch_no + at, {1: events}))
    return batches

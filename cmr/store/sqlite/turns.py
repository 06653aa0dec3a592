"""Writers of one SQLite file take turns on a lock of their own (``cmr serve --workers N``).

SQLite lets one connection write at a time. A connection that finds the file locked waits in
SQLite's busy handler, which polls by sleeping (1, 2, 5, 10 ... 100 ms, up to the busy
timeout): N workers storing the batches of one endpoint met each other at nearly every commit,
and the one that lost slept on while the file was already free (issue 33: a worker's transaction
of short sequences takes a few milliseconds). Here each worker takes an exclusive ``flock`` on
``<file>-writers`` around its write transaction; the kernel wakes the next one the moment the lock
is let go, so the writers alternate without sleeping, each packing its next group while the other
writes.

The turn is an aid, never the guard: SQLite's own lock and busy timeout still decide who writes
(another program, ``cmr prune``, or a path naming the same file another way do not take turns and
are as safe as before). A lock file that cannot be opened leaves the workers on SQLite's lock
alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator

log = logging.getLogger(__name__)

#: Beside the database, as SQLite's own ``-wal`` and ``-shm`` are.
SUFFIX = "-writers"


class WriterTurns:
    """An exclusive ``flock`` on ``path + SUFFIX``, held for one write transaction at a time."""

    __slots__ = ("_fd",)

    def __init__(self, path: str) -> None:
        self._fd: int | None
        try:
            self._fd = os.open(path + SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            log.warning("cmr: writers of %s wait on SQLite's lock alone: %s", path, exc)
            self._fd = None

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the turn for the block (at once when no other writer holds it)."""
        fd = self._fd
        if fd is None:
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

"""Checkpoints beside the writers (``cmr serve``, alone or ``--workers``): the WAL copied into the
file by a thread of each writing process, outside the commits and the write turn.

In WAL mode SQLite appends each commit's pages to ``<file>-wal`` and copies them into the file
at a *checkpoint*. The writer whose commit takes the WAL past ``wal_autocheckpoint`` (32 MiB
here) does it inside that commit: it syncs the WAL, copies the pages, syncs the file, about 90
ms here, inside the writer's turn (``cmr.store.sqlite.turns``), so the other workers and every
acknowledgement wait (issue 33, goal 6: a fifth of the time of 100,000 ten-call sequences into
``cmr serve --workers 2``; a lone writer's commits of big sequences stalled 0.2-0.6 s, goal 1).

A ``Checkpointer`` is told of each commit (``committed``) and, once the WAL holds ``AHEAD``
frames the file does not, runs a *passive* checkpoint on a connection of its own: it copies
them while the workers go on writing (a passive checkpoint takes no write lock and waits on
none) and while its own worker decodes and packs the next group. The automatic checkpoint is
left as it is: it is what starts the WAL over (SQLite does that only at a writer's first write
after a checkpoint copied every frame, which a checkpoint beside steady writers rarely sees), but
it finds the frames mostly copied, so what is left in the turn is a little copying and two short
syncs. Once the WAL is half full (``RESTART_FROM``) the thread copies after every commit: a
copy of one commit's frames often finishes between two commits, and the WAL starts over there;
otherwise the automatic checkpoint finds one commit's frames left, or the thread's copy under
way (it then returns at once). Past ``GIVE_WAY_AT`` the thread leaves the WAL to the writers, so
that a writer that never pauses cannot grow it without bound. How many frames wait is read
from the WAL index's header in ``<file>-shm`` (``mxFrame`` less ``nBackfill``:
https://www.sqlite.org/walformat.html), which costs a read, not a checkpoint. Nothing runs
while nothing is written: the thread waits on an event.

The WAL index is opened once and its descriptor kept until the store's connections are closed
(``close``), never opened and closed per read: SQLite's locks on ``<file>-shm`` are POSIX
advisory locks, which belong to the process, and closing *any* descriptor of the file drops all
of them (https://www.sqlite.org/howtocorrupt.html, 2.2). A process that did so after each commit
lost its lock on the index; the next reader from another process (``cmr ls`` while ``cmr serve``
writes) found it unlocked, took it for its own and truncated it, and the server died of SIGBUS at
its next access to the mapped index (stop 62: seen in CI, reproduced in a few seconds by hand).

A checkpoint that fails (a read error, a full disk) is logged once and left to the next commit
and the automatic checkpoint: the writers never see it. One that finds another checkpoint under
way (the other workers' threads, a writer's automatic one) returns at once, as SQLite's passive
checkpoints do, and a writer's automatic checkpoint that finds this one under way is tried
again at the next commit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import struct
import threading

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final

log = logging.getLogger(__name__)

#: Frames the WAL may hold beyond what the file has before a checkpoint copies them: 8 MiB of
#: 4 KiB pages, a quarter of ``wal_autocheckpoint``. Fewer, and pages written again by the
#: next commits are copied again; more, and more is left for the turn.
AHEAD: Final = 2048
#: Frames in the WAL from which every commit is followed by a checkpoint, however few frames
#: wait: 16 MiB, half of ``wal_autocheckpoint``. The WAL starts over only at a writer's first
#: write after a checkpoint copied all of it (the module's docstring), and a checkpoint of
#: ``AHEAD`` frames or more, syncs included, outlasts the gap between a busy writer's commits.
#: Copied a commit at a time, it often finishes in the gap (the WAL then starts over), and
#: otherwise the automatic checkpoint finds a commit's frames left or the copy under way (stop
#: 63: the commit past ``wal_autocheckpoint`` took 0.15-0.26 s; the longest now 46-82 ms).
RESTART_FROM: Final = 4096
#: Frames in the WAL from which the thread leaves it to the writers' automatic checkpoint: 64
#: MiB, twice ``wal_autocheckpoint``. A writer that never pauses long enough for a copy to finish
#: between its commits would otherwise find a copy under way at every automatic checkpoint (which
#: then returns at once) and its WAL would grow without bound; left alone, the next one copies
#: what waits (a commit's frames or so) and the WAL starts over at the next write.
GIVE_WAY_AT: Final = 16384
#: ``mxFrame`` (frames in the WAL) and ``nBackfill`` (frames copied into the file) in the WAL
#: index's header, in the machine's byte order.
_MX_FRAME: Final = struct.Struct("=I")
_MX_FRAME_AT: Final = 16
_BACKFILLED_AT: Final = 96
_HEADER_BYTES: Final = 100
#: What is logged once when the thread cannot copy the WAL.
_LEFT: Final = "cmr: checkpoints of %s left to the writers: %s"


def wal_index_frames(header: bytes) -> tuple[int, int] | None:
    """Frames in the WAL and frames of it copied into the file, from the first bytes of the WAL
    index (None: too few of them)."""
    if len(header) < _HEADER_BYTES:
        return None
    frames = _MX_FRAME.unpack_from(header, _MX_FRAME_AT)[0]
    return int(frames), int(_MX_FRAME.unpack_from(header, _BACKFILLED_AT)[0])


class Checkpointer:
    """A thread copying the WAL of ``path`` into the file once ``ahead`` frames wait, and after
    every commit once the WAL holds ``restart_from`` frames, until it holds ``give_way_at``."""

    __slots__ = (
        "_ahead",
        "_conn",
        "_give_way_at",
        "_index",
        "_path",
        "_restart_from",
        "_stopping",
        "_thread",
        "_wake",
        "_warned",
    )

    def __init__(
        self,
        path: str,
        busy_timeout_ms: int,
        *,
        ahead: int = AHEAD,
        restart_from: int = RESTART_FROM,
        give_way_at: int = GIVE_WAY_AT,
    ) -> None:
        self._path = path
        self._ahead = ahead
        self._restart_from = restart_from
        self._give_way_at = give_way_at
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        # The WAL index, kept open until ``close`` (the module's docstring says why); None when
        # it cannot be opened: then every commit is followed by a checkpoint.
        self._index: int | None = None
        with contextlib.suppress(OSError):
            self._index = os.open(path + "-shm", os.O_RDONLY)
        self._wake = threading.Event()
        self._stopping = False
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="invoseq-checkpoints", daemon=True)
        self._thread.start()

    @classmethod
    def beside(cls, path: str, busy_timeout_ms: int) -> Checkpointer | None:
        """A checkpointer for the writers of ``path``, or None (logged) when its connection
        cannot be opened: the writers' automatic checkpoints then go on alone."""
        try:
            return cls(path, busy_timeout_ms)
        except sqlite3.Error as exc:
            log.warning(_LEFT, path, exc)
            return None

    def committed(self) -> None:
        """A writer committed: copy the WAL if enough of it waits (at once when idle)."""
        self._wake.set()

    def frames(self) -> tuple[int, int] | None:
        """Frames in the WAL and frames of it in the file (None: the WAL index cannot be read)."""
        if self._index is None:
            return None
        try:
            header = os.pread(self._index, _HEADER_BYTES, 0)
        except OSError:
            return None
        return wal_index_frames(header)

    def waiting(self) -> int | None:
        """Frames in the WAL not yet in the file (None: the WAL index cannot be read)."""
        counts = self.frames()
        return None if counts is None else counts[0] - counts[1]

    def due(self) -> bool:
        """Whether the WAL should be copied now: ``ahead`` frames wait, or any do once the WAL
        holds ``restart_from`` frames (or how many cannot be read); never once it holds
        ``give_way_at``."""
        counts = self.frames()
        if counts is None:
            return True
        frames, copied = counts
        waiting = frames - copied
        if frames >= self._give_way_at:
            return False
        return waiting >= self._ahead or (waiting > 0 and frames >= self._restart_from)

    def pass_once(self) -> bool:
        """Copy the WAL into the file if it is ``due``: whether a checkpoint ran. The thread's
        work after each commit; a failure is logged once."""
        if not self.due():
            return False
        try:
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            if not self._warned:
                self._warned = True
                log.warning(_LEFT, self._path, exc)
            return False
        return True

    def _run(self) -> None:
        wake = self._wake
        while True:
            wake.wait()
            wake.clear()
            if self._stopping:
                return
            self.pass_once()

    def close(self) -> None:
        """Stop the thread (after the checkpoint in progress), close its connection and the WAL
        index: after the writers' connections of this process are closed (see the module's
        docstring)."""
        self._stopping = True
        self._wake.set()
        self._thread.join()
        self._conn.close()
        if self._index is not None:
            os.close(self._index)
            self._index = None

"""The default backend: one SQLite file, written by `cmr serve`, read by the CLI at the same time.

Events are stored as their batches arrived (``cmr.store.stored_batches``): one blob per batch and a
small index, so ingest costs a handful of statements per batch rather than one per event, and a tree
reads only its own batches. Hand-offs get a table of their own, keyed by ``hid`` and joined to the
invocations that continue them only when a tree is built, so they may arrive before or after
those invocations. The ``sequences`` table keeps each sequence's earliest start so that listing
and prefix lookup never scan the events. Stack samples live in tables of their own
(``sqlite_samples``), keyed by thread and time. The reads are ``SQLiteReader``'s
(``cmr.store.sqlite.reader``), which commands that only read open alone.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from cmr.store.batch_index import PackingStore, Preparation
from cmr.store.sqlite import read as sqlite_read
from cmr.store.sqlite.reader import BUSY_TIMEOUT_MS, SQLiteReader
from cmr.store.sqlite.single import RootNames, stage
from cmr.store.sqlite.writes import GroupPlan, write_group

if TYPE_CHECKING:
    from cmr.store.base import OnStep, Outcome, PruneResult
    from cmr.store.sqlite.checkpoints import Checkpointer
    from cmr.store.sqlite.turns import WriterTurns

__all__ = ["BUSY_TIMEOUT_MS", "SQLiteStore"]


class SQLiteStore(PackingStore, SQLiteReader):
    """A repository in one SQLite file, read and written: ``SQLiteReader`` with the write side.
    Thread-safe: one connection, used under a lock.

    ``clock`` (wall-clock nanoseconds) tells reads how long a process has been silent."""

    _turns: WriterTurns | None = None
    _checkpoints: Checkpointer | None = None
    _names: RootNames | None = None  # made at the first group (``single.RootNames``)

    def share_writes(self) -> None:
        """Other processes store into this file at the same time (``cmr serve --workers``):
        take turns with them around each group's transaction (``cmr.store.sqlite.turns``),
        with the group's single rows staged before it, and copy the WAL into the file outside
        the turns (``cmr.store.sqlite.checkpoints``)."""
        if self._turns is None:
            from cmr.store.sqlite.turns import WriterTurns  # workers only

            self._turns = WriterTurns(self.path)
        self.serving()

    def serving(self) -> None:
        """A server writes this store steadily from now on: copy the WAL into the file on a
        thread beside the commits (``cmr.store.sqlite.checkpoints``), so that no commit stalls
        for a whole checkpoint while the acknowledgements wait."""
        if self._checkpoints is None:
            from cmr.store.sqlite.checkpoints import Checkpointer  # servers only

            self._checkpoints = Checkpointer.beside(self.path, BUSY_TIMEOUT_MS)

    def ingest_prepared(self, group: Preparation, received_ns: int) -> list[Outcome]:
        outcomes = list(group.outcomes)
        if group.prepared:
            names = self._names
            if names is None:
                names = self._names = RootNames()
            plan = GroupPlan(group.in_write_order(), names)  # before the turn: no database
            turns = self._turns
            if turns is not None:  # what binding can, outside the turn
                with self._transaction("BEGIN") as conn:  # the temporary database: no lock
                    stage(conn, plan.singles)
            with (
                turns.turn() if turns is not None else contextlib.nullcontext(),
                self._transaction("BEGIN IMMEDIATE") as conn,
            ):
                write_group(conn, plan, outcomes, received_ns, names)
            if self._checkpoints is not None:
                self._checkpoints.committed()
        return outcomes

    def record_rejected(self, reason: str, count: int = 1) -> None:
        with self._transaction("BEGIN IMMEDIATE") as conn:
            conn.execute(
                "INSERT INTO rejected VALUES (?, ?) "
                "ON CONFLICT (reason) DO UPDATE SET frames = frames + excluded.frames",
                (reason, count),
            )

    def prune(self, before_ns: int, *, on_step: OnStep | None = None) -> PruneResult:
        with self._transaction("BEGIN IMMEDIATE") as conn:
            return sqlite_read.prune(conn, before_ns, on_step)

    def close(self) -> None:
        super().close()
        if self._checkpoints is not None:  # after: it closes its descriptor of the WAL index
            self._checkpoints.close()
        if self._turns is not None:
            self._turns.close()

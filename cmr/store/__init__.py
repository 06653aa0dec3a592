"""Opening a repository: the one place that turns a user's ``--db`` into a Store."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

from cmr.defaults import DB_ENV, DEFAULT_DB_PATH, needs_extra
from cmr.store.base import (
    PROCESS_ALIVE,
    PROCESS_ENDED,
    PROCESS_LOST,
    REMOTE_PARENT,
    AmbiguousSequenceError,
    InvalidBatchError,
    MethodRecord,
    ProcessRecord,
    SequenceSummary,
    Store,
    StoreError,
    UnknownSequenceError,
)
from cmr.store.rules import LOST_GRACE_MS, MISSED_HEARTBEATS

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # cmr.store.records, loaded on use as in cmr.store.base
    from typing import Final

    from cmr.store.records import (
        FrameRecord,
        HandoffRecord,
        InvocationRecord,
        SampleRecord,
        SamplerRecord,
        SequenceData,
        StoreStats,
        ThreadRecord,
    )

__all__ = [
    "LOST_GRACE_MS",
    "MISSED_HEARTBEATS",
    "PROCESS_ALIVE",
    "PROCESS_ENDED",
    "PROCESS_LOST",
    "REMOTE_PARENT",
    "AmbiguousSequenceError",
    "FrameRecord",
    "HandoffRecord",
    "InvalidBatchError",
    "InvocationRecord",
    "MethodRecord",
    "ProcessRecord",
    "SampleRecord",
    "SamplerRecord",
    "SequenceData",
    "SequenceSummary",
    "Store",
    "StoreError",
    "StoreStats",
    "ThreadRecord",
    "UnknownSequenceError",
    "default_db_path",
    "open_store",
    "repository_target",
]


def __getattr__(name: str) -> object:
    from cmr.store import base

    if name in base._RECORDS:
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_URL: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def default_db_path() -> str:
    """INVOSEQ_DB if set, else DEFAULT_DB_PATH."""
    return os.environ.get(DB_ENV) or DEFAULT_DB_PATH


def repository_target(db: str | None) -> str:
    """What ``open_store(db)`` opens, as another process (in another directory) opens it: the
    URL as given, a file path made absolute."""
    target = db or default_db_path()
    return target if _URL.match(target) else os.path.abspath(target)


def open_store(
    db: str | None = None,
    *,
    memory: bool = False,
    readonly: bool = False,
    clock: Callable[[], int] = time.time_ns,
) -> Store:
    """Open the repository ``db`` (a file path; default: ``default_db_path()``).

    ``memory`` gives a fresh in-memory repository and ignores ``db``. ``readonly`` is for commands
    that only inspect: it never creates anything and fails clearly when there is no repository.
    ``clock`` (wall-clock nanoseconds) is what reads measure a process's silence against.
    Raises StoreError with a one-line message for anything the user can fix."""
    if memory:
        from cmr.store.memory.store import MemoryStore

        return MemoryStore(clock=clock)
    target = db or default_db_path()
    url = _URL.match(target)
    if url:
        scheme = url.group(1).lower()
        if scheme in {"postgresql", "postgres"}:
            try:
                from cmr.store.postgres.store import PostgresStore
            except ImportError as exc:
                if (exc.name or "").partition(".")[0] != "psycopg":
                    raise
                raise StoreError(needs_extra("a PostgreSQL repository", "postgres")) from exc
            return PostgresStore(target, readonly=readonly, clock=clock)
        raise StoreError(
            f"unsupported repository '{target}': give a file path or a postgresql:// URL"
        )
    if readonly:  # the read side alone: no ingest machinery to load
        from cmr.store.sqlite.reader import SQLiteReader

        return SQLiteReader(target, readonly=True, clock=clock)
    from cmr.store.sqlite.store import SQLiteStore

    return SQLiteStore(target, clock=clock)

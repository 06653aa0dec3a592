"""The SQLite backend's read side: ``SQLiteReader`` opens a repository file and answers the
reads (``list_sequences``, ``resolve_sequence``, ``load_sequence``, ``find_sequences``,
``stats``); ``SQLiteStore`` (``cmr.store.sqlite.store``) adds the write side to it. A command that
only reads opens a reader (``open_store(readonly=True)``), which loads none of the ingest
machinery (``cmr.store.batch_index``), and what only a sequence's tree needs (its batches unpacked,
its samples) when one is loaded: ``cmr ls`` loads neither, nor msgspec.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import heapq
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from cmr.store import block_pages, listing_sql, migrations
from cmr.store.base import (
    SequenceQuery,
    SequenceSummary,
    Store,
    StoreError,
    UnknownSequenceError,
)
from cmr.store.listing import select_lines
from cmr.store.rules import SHOWN_MATCHES, SeqRange, check_limit, pick_match, seq_range
from cmr.store.sqlite import blocks
from cmr.store.sqlite import read as sqlite_read
from cmr.store.sqlite import summaries as sqlite_summaries
from cmr.store.sqlite.connect import connect, missing
from cmr.store.sqlite.schema import SCHEMA, SCHEMA_VERSION, STEPS
from cmr.store.sqlite.statements import (
    LOST_WINDOWS_OF,
    METHODS_BY_RECENT_SEQUENCE,
    NAMED_METHODS,
    PROCESS_COLUMNS,
    SINGLE_ROW_METHODS,
)

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Any, Final

    from cmr.store.base import Neighbours, OnStep, PruneResult, SequenceData, StoreStats
    from invoseq.wire import Batch

#: The most negative SQLite INTEGER: no sequence starts before it.
_I64_MIN: Final = -(2**63)

#: A sequence's neighbours in id order (``Store.neighbours``): a step each way in the primary
#: key's index.
NEIGHBOURS: Final = (
    "SELECT (SELECT seq FROM sequences WHERE seq < ? ORDER BY seq DESC LIMIT 1),"
    " (SELECT seq FROM sequences WHERE seq > ? ORDER BY seq LIMIT 1)"
)

#: How long a reader or writer waits for a lock held by another connection before failing.
BUSY_TIMEOUT_MS: Final = 10_000
#: The page cache of a connection that writes, at most (KiB).
WRITER_CACHE_KIB: Final = 65_536


class SQLiteReader(Store):
    """A repository in one SQLite file, for reading. Thread-safe: one connection, used under a
    lock.

    ``clock`` (wall-clock nanoseconds) tells reads how long a process has been silent."""

    def __init__(
        self,
        path: str,
        *,
        readonly: bool = False,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.path = path
        self._clock = clock
        self._lock = _thread.allocate_lock()  # threading.Lock
        self._conn: sqlite3.Connection | None = connect(path, readonly, busy_timeout_ms)
        try:
            self._prepare(readonly)
        except BaseException:
            self._conn.close()
            raise

    def _prepare(self, readonly: bool) -> None:
        conn = self._connection()
        if not readonly:
            # WAL lets the CLI read while `cmr serve` writes. With synchronous=NORMAL a commit is
            # durable once it returns as far as a crash of this process goes; an OS crash or power
            # loss can lose the last transactions (the WAL is synced at checkpoints, not at every
            # commit) but never corrupts the file. The ack therefore survives a repository crash,
            # not a power cut; that trade buys several times the ingest rate of synchronous=FULL.
            self._pragma("PRAGMA journal_mode = WAL")
            self._pragma("PRAGMA synchronous = NORMAL")
            # Checkpoint the WAL into the database every 32 MiB rather than SQLite's 4 MiB: each
            # checkpoint syncs, and at full ingest rate the default makes that every few batches.
            self._pragma("PRAGMA wal_autocheckpoint = 8192")
            # A writer's page cache of up to 64 MiB, not SQLite's 2 MiB: a group of short
            # sequences touches a page of every index keyed by sequence id per few rows, and a
            # transaction whose dirty pages outgrow the cache writes them to the WAL early, then
            # again at commit (issue 33: 100,000 one-call sequences read 50,557 pages and wrote
            # 85,214 with 2 MiB, 17,237 and 70,335 with 64 MiB). Allocated as pages are used.
            self._pragma(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        with self._transaction("BEGIN" if readonly else "BEGIN IMMEDIATE"):
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise StoreError(f"{self.path} is not an invoseq repository")
                if readonly:
                    raise StoreError(missing(self.path))
                for statement in SCHEMA:
                    conn.execute(statement)
            elif version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has repository schema version {version}, newer than this "
                    f"invoseq understands ({SCHEMA_VERSION}): upgrade invoseq"
                )
            elif version < 0:
                raise StoreError(f"{self.path} has an unknown schema version {version}")
            elif version < SCHEMA_VERSION:
                if readonly:
                    raise StoreError(
                        f"{self.path} has repository schema version {version}, older than this "
                        f"invoseq uses ({SCHEMA_VERSION}): run `cmr serve` or `tracer run` on it "
                        "once to upgrade it"
                    )
                migrations.upgrade(
                    conn,
                    STEPS,
                    version,
                    execute=sqlite3.Connection.execute,
                    record=_record_version,
                    data_last=True,
                )

    # -- read side ------------------------------------------------------------------------

    def list_sequences(
        self, limit: int, query: SequenceQuery | None = None
    ) -> list[SequenceSummary]:
        check_limit(limit)
        now = self._clock()
        with self._transaction("BEGIN") as conn:
            plan = listing_sql.plan(query, listing_sql.SQLITE, _rows_of(conn))
            page = functools.partial(
                sqlite_summaries.page, conn=conn, query=query, plan=plan, now=now
            )
            return select_lines(page, limit, query)

    def resolve_sequence(self, prefix: str) -> bytes:
        wanted = seq_range(prefix)
        where, params = _range_clause(wanted)
        with self._transaction("BEGIN") as conn:
            count = conn.execute(f"SELECT count(*) FROM sequences WHERE {where}", params)
            matches = count.fetchone()[0]
            first = conn.execute(
                f"SELECT seq FROM sequences WHERE {where} ORDER BY seq LIMIT {SHOWN_MATCHES}",
                params,
            ).fetchall()
        return pick_match(wanted, matches, [seq for (seq,) in first])

    def neighbours(self, seqs: Sequence[bytes]) -> dict[bytes, Neighbours]:
        with self._transaction("BEGIN") as conn:
            return {seq: conn.execute(NEIGHBOURS, (seq, seq)).fetchone() for seq in seqs}

    def load_sequence(self, seq: bytes, *, samples: bool = True) -> SequenceData:
        now = self._clock()
        with self._transaction("BEGIN") as conn:
            return self._load(conn, seq, now, samples=samples)

    def _load(
        self,
        conn: sqlite3.Connection,
        seq: bytes,
        now: int,
        *,
        samples: bool,
    ) -> SequenceData:
        from cmr.store._samples import sample_windows, without_gaps
        from cmr.store.columns import distinct_values
        from cmr.store.records import SequenceData
        from cmr.store.sqlite.samples import load_samples, sampled_threads

        invocations = sqlite_read.invocations(conn, seq)
        if not invocations:
            raise UnknownSequenceError(f"no sequence {seq.hex()}")
        handoffs = sqlite_read.handoffs(conn, seq, invocations)
        methods, threads = sqlite_read.names(conn, invocations, handoffs)
        lost_windows = {
            puid: (first, last)
            for puid, first, last in conn.execute(LOST_WINDOWS_OF, {"seq": seq}).fetchall()
        }
        lost_by = frozenset(
            puid for (puid,) in conn.execute("SELECT puid FROM lost_seqs WHERE seq = ?", (seq,))
        ).union(lost_windows)
        puids = distinct_values(invocations, "puid") | {h.puid for h in handoffs.values()} | lost_by
        processes = sqlite_read.processes(conn, puids, now)
        sampled, frames = (
            load_samples(conn, sample_windows(invocations, sampled_threads(conn, puids)))
            if samples
            else ([], {})
        )
        sampled, gaps = without_gaps(sampled)
        return SequenceData(
            seq, invocations, methods, threads, processes, handoffs, sampled, frames, lost_by,
            gaps=gaps, lost_windows=lost_windows,
        )  # fmt: skip

    def find_sequences(self, method: str, *, since_ns: int | None, limit: int) -> list[bytes]:
        from cmr.store.stored_batches import methods_of

        check_limit(limit)
        since = _I64_MIN if since_ns is None else since_ns
        found: list[bytes] = []
        with self._transaction("BEGIN") as conn:
            wanted = set(conn.execute(NAMED_METHODS, {"name": method}).fetchall())
            if not wanted or limit == 0:
                return found
            rows = heapq.merge(
                conn.execute(METHODS_BY_RECENT_SEQUENCE, {"since": since}),
                block_pages.newest_first(conn.execute, blocks.LAYOUT, SINGLE_ROW_METHODS, since),
                key=block_pages.start_and_id,
                reverse=True,
            )
            for _start, seq, puid, blob in rows:
                if found and found[-1] == seq:
                    continue
                if any((puid, m) in wanted for m in methods_of(blob)):
                    found.append(seq)
                    if len(found) == limit:
                        break
        return found

    def stats(self) -> StoreStats:
        from cmr.store.sqlite.samples import load_samplers

        now = self._clock()
        with self._transaction("BEGIN") as conn:
            counters = dict(conn.execute("SELECT name, value FROM counters"))
            rejected = dict(conn.execute("SELECT reason, frames FROM rejected ORDER BY reason"))
            processes = [
                sqlite_read.process_record(row, now)
                for row in conn.execute(
                    f"SELECT {PROCESS_COLUMNS} FROM processes ORDER BY last_seen_ns DESC, puid"
                )
            ]
            samplers = load_samplers(conn)
        from cmr.store.records import StoreStats

        return StoreStats(
            batches=counters["batches"],
            duplicate_batches=counters["duplicate_batches"],
            events=counters["events"],
            rejected=rejected,
            processes=processes,
            samples=counters["samples"],
            samplers=samplers,
        )

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- the write side is SQLiteStore's ------------------------------------------------------

    def ingest(self, batch: Batch, received_ns: int) -> bool:
        raise self._read_only()

    def record_rejected(self, reason: str, count: int = 1) -> None:
        raise self._read_only()

    def prune(self, before_ns: int, *, on_step: OnStep | None = None) -> PruneResult:
        raise self._read_only()

    def _read_only(self) -> StoreError:
        return StoreError(f"the repository {self.path} is open readonly: nothing is written")

    # -- plumbing -------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the repository {self.path} is closed")
        return self._conn

    def _pragma(self, statement: str) -> None:
        try:
            self._connection().execute(statement)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot use repository {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        """One transaction under the lock; SQLite errors become one-line StoreErrors."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute(begin)
                try:
                    yield conn
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"repository {self.path}: {exc}") from exc
            except OverflowError as exc:  # an integer SQLite cannot hold
                raise StoreError(f"repository {self.path}: {exc}") from exc


def _record_version(conn: sqlite3.Connection, step: migrations.Step) -> None:
    conn.execute(f"PRAGMA user_version = {step.version}")


def _range_clause(wanted: SeqRange) -> tuple[str, tuple[bytes, ...]]:
    if wanted.hi is None:
        return "seq >= ?", (wanted.lo,)
    return "seq >= ? AND seq < ?", (wanted.lo, wanted.hi)


def _rows_of(conn: sqlite3.Connection) -> listing_sql.Rows:
    def rows(sql: str, params: Mapping[str, object]) -> list[tuple[Any, ...]]:
        return conn.execute(sql, params).fetchall()

    return rows

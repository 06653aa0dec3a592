"""The default backend: one SQLite file, written by `cmr serve`, read by the CLI at the same time.

Events are stored insert-only: a Start row and an End row per invocation, in two tables joined on
read, so an End that arrives in an earlier or later batch than its Start needs no update. The
``sequences`` table keeps each sequence's earliest start so that listing and prefix lookup never
scan the events.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from typing import Final
from urllib.parse import quote

from cmr.store._shared import (
    SHOWN_MATCHES,
    SeqRange,
    check_limit,
    event_rows,
    pick_match,
    qualified_name,
    seq_range,
    sequence_status,
)
from cmr.store.base import (
    InvocationRecord,
    MethodRecord,
    ProcessRecord,
    SequenceData,
    SequenceSummary,
    Store,
    StoreError,
    StoreStats,
    ThreadRecord,
    UnknownSequenceError,
)
from tracer.wire import Batch

SCHEMA_VERSION: Final = 1
#: How long a reader or writer waits for a lock held by another connection before failing.
BUSY_TIMEOUT_MS: Final = 10_000

_SCHEMA: Final = (
    """CREATE TABLE processes (
        puid INTEGER PRIMARY KEY,
        pid INTEGER NOT NULL,
        host TEXT NOT NULL,
        platform_id TEXT NOT NULL,
        argv TEXT NOT NULL,  -- JSON array
        clock_offset_ns INTEGER NOT NULL,
        started_ns INTEGER NOT NULL,
        ended INTEGER NOT NULL,  -- a final batch arrived
        dropped INTEGER NOT NULL,  -- cumulative: the largest count reported
        last_seen_ns INTEGER NOT NULL
    )""",
    """CREATE TABLE methods (
        puid INTEGER NOT NULL, method INTEGER NOT NULL,
        module TEXT NOT NULL, qualname TEXT NOT NULL, file TEXT NOT NULL, line INTEGER NOT NULL,
        PRIMARY KEY (puid, method)
    ) WITHOUT ROWID""",
    """CREATE TABLE threads (
        puid INTEGER NOT NULL, tid INTEGER NOT NULL, native_id INTEGER NOT NULL, name TEXT NOT NULL,
        PRIMARY KEY (puid, tid)
    ) WITHOUT ROWID""",
    """CREATE TABLE starts (
        puid INTEGER NOT NULL, iid INTEGER NOT NULL, seq BLOB NOT NULL,
        parent INTEGER NOT NULL, hid INTEGER NOT NULL, tid INTEGER NOT NULL,
        method INTEGER NOT NULL, start_ns INTEGER NOT NULL,
        PRIMARY KEY (puid, iid)
    ) WITHOUT ROWID""",
    "CREATE INDEX starts_by_seq ON starts (seq)",
    """CREATE TABLE ends (
        puid INTEGER NOT NULL, iid INTEGER NOT NULL, end_ns INTEGER NOT NULL, error TEXT,
        PRIMARY KEY (puid, iid)
    ) WITHOUT ROWID""",
    """CREATE TABLE sequences (
        seq BLOB PRIMARY KEY, start_ns INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX sequences_by_start ON sequences (start_ns, seq)",
    """CREATE TABLE batches (
        puid INTEGER NOT NULL, batch_no INTEGER NOT NULL,
        received_ns INTEGER NOT NULL, events INTEGER NOT NULL,
        PRIMARY KEY (puid, batch_no)
    ) WITHOUT ROWID""",
    "CREATE TABLE rejected (reason TEXT PRIMARY KEY, frames INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO counters VALUES ('batches', 0), ('duplicate_batches', 0), ('events', 0)",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

_UPSERT_PROCESS: Final = """
    INSERT INTO processes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (puid) DO UPDATE SET
        ended = max(ended, excluded.ended),
        dropped = max(dropped, excluded.dropped),
        last_seen_ns = max(last_seen_ns, excluded.last_seen_ns)"""
_UPSERT_SEQUENCE: Final = """
    INSERT INTO sequences VALUES (?, ?)
    ON CONFLICT (seq) DO UPDATE SET start_ns = min(start_ns, excluded.start_ns)"""
_INVOCATIONS: Final = """
    SELECT s.puid, s.iid, s.parent, s.hid, s.tid, s.method, s.start_ns, e.end_ns, e.error
    FROM starts s LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid
    WHERE s.seq = ? ORDER BY s.start_ns, s.puid, s.iid"""
_COUNTS: Final = """
    SELECT count(*), count(DISTINCT s.puid),
           coalesce(sum(e.iid IS NULL AND NOT p.ended), 0),
           coalesce(sum(e.iid IS NULL AND p.ended), 0)
    FROM starts s
    LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid
    JOIN processes p ON p.puid = s.puid
    WHERE s.seq = ?"""
# The ORDER BY restates _shared.root_rank.
_ROOT: Final = """
    SELECT s.method, e.end_ns, m.module, m.qualname
    FROM starts s
    LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid
    LEFT JOIN methods m ON m.puid = s.puid AND m.method = s.method
    WHERE s.seq = ?
    ORDER BY s.parent != 0, s.hid != 0, s.start_ns, s.puid, s.iid LIMIT 1"""
_PROCESS_COLUMNS: Final = "puid, pid, host, platform_id, argv, ended, dropped, last_seen_ns"


class SQLiteStore(Store):
    """A repository in one SQLite file. Thread-safe: one connection, used under a lock."""

    def __init__(
        self, path: str, *, readonly: bool = False, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = _connect(path, readonly, busy_timeout_ms)
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
        with self._transaction("BEGIN" if readonly else "BEGIN IMMEDIATE"):
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise StoreError(f"{self.path} is not an invoseq repository")
                if readonly:
                    raise StoreError(_missing(self.path))
                for statement in _SCHEMA:
                    conn.execute(statement)
            elif version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has repository schema version {version}, newer than this "
                    f"invoseq understands ({SCHEMA_VERSION}): upgrade invoseq"
                )
            elif version < SCHEMA_VERSION:  # pragma: no cover - no older version exists yet
                raise StoreError(f"{self.path} has an unknown schema version {version}")

    # -- write side -----------------------------------------------------------------------

    def ingest(self, batch: Batch, received_ns: int) -> bool:
        rows = event_rows(batch)
        process = batch.process
        events = len(rows.starts) + len(rows.ends)
        with self._transaction("BEGIN IMMEDIATE") as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO batches VALUES (?, ?, ?, ?)",
                (batch.puid, batch.batch_no, received_ns, events),
            )
            if cursor.rowcount == 0:
                conn.execute(
                    "UPDATE counters SET value = value + 1 WHERE name = 'duplicate_batches'"
                )
                return False
            conn.execute(
                _UPSERT_PROCESS,
                (
                    batch.puid,
                    process.pid,
                    process.host,
                    process.platform_id,
                    json.dumps(process.argv),
                    process.clock_offset_ns,
                    process.started_ns,
                    int(batch.final),
                    batch.dropped,
                    received_ns,
                ),
            )
            if batch.methods:
                conn.executemany(
                    "INSERT OR REPLACE INTO methods VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (batch.puid, m.method, m.module, m.qualname, m.file, m.line)
                        for m in batch.methods
                    ],
                )
            if batch.threads:
                conn.executemany(
                    "INSERT OR REPLACE INTO threads VALUES (?, ?, ?, ?)",
                    [(batch.puid, t.tid, t.native_id, t.name) for t in batch.threads],
                )
            # First write wins for an event key: a replayed or forged duplicate changes nothing.
            conn.executemany(
                "INSERT OR IGNORE INTO starts VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows.starts
            )
            conn.executemany("INSERT OR IGNORE INTO ends VALUES (?, ?, ?, ?)", rows.ends)
            conn.executemany(_UPSERT_SEQUENCE, rows.first_start.items())
            conn.executemany(
                "UPDATE counters SET value = value + ? WHERE name = ?",
                ((1, "batches"), (events, "events")),
            )
        return True

    def record_rejected(self, reason: str, count: int = 1) -> None:
        with self._transaction("BEGIN IMMEDIATE") as conn:
            conn.execute(
                "INSERT INTO rejected VALUES (?, ?) "
                "ON CONFLICT (reason) DO UPDATE SET frames = frames + excluded.frames",
                (reason, count),
            )

    # -- read side ------------------------------------------------------------------------

    def list_sequences(self, limit: int) -> list[SequenceSummary]:
        check_limit(limit)
        with self._transaction("BEGIN") as conn:
            recent = conn.execute(
                "SELECT seq, start_ns FROM sequences ORDER BY start_ns DESC, seq DESC LIMIT ?",
                (limit,),
            ).fetchall()
            return [_summary(conn, seq, start_ns) for seq, start_ns in recent]

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

    def load_sequence(self, seq: bytes) -> SequenceData:
        with self._transaction("BEGIN") as conn:
            invocations = [InvocationRecord(*row) for row in conn.execute(_INVOCATIONS, (seq,))]
            if not invocations:
                raise UnknownSequenceError(f"no sequence {seq.hex()}")
            methods = {
                (puid, method): MethodRecord(module, qualname, file, line)
                for puid, method, module, qualname, file, line in conn.execute(
                    "SELECT puid, method, module, qualname, file, line FROM methods WHERE "
                    "(puid, method) IN (SELECT DISTINCT puid, method FROM starts WHERE seq = ?)",
                    (seq,),
                )
            }
            threads = {
                (puid, tid): ThreadRecord(native_id, name)
                for puid, tid, native_id, name in conn.execute(
                    "SELECT puid, tid, native_id, name FROM threads "
                    "WHERE (puid, tid) IN (SELECT DISTINCT puid, tid FROM starts WHERE seq = ?)",
                    (seq,),
                )
            }
            processes = {
                record.puid: record
                for record in map(
                    _process_record,
                    conn.execute(
                        f"SELECT {_PROCESS_COLUMNS} FROM processes "
                        "WHERE puid IN (SELECT DISTINCT puid FROM starts WHERE seq = ?)",
                        (seq,),
                    ),
                )
            }
        return SequenceData(seq, invocations, methods, threads, processes)

    def stats(self) -> StoreStats:
        with self._transaction("BEGIN") as conn:
            counters = dict(conn.execute("SELECT name, value FROM counters"))
            rejected = dict(conn.execute("SELECT reason, frames FROM rejected ORDER BY reason"))
            processes = [
                _process_record(row)
                for row in conn.execute(
                    f"SELECT {_PROCESS_COLUMNS} FROM processes ORDER BY last_seen_ns DESC, puid"
                )
            ]
        return StoreStats(
            batches=counters["batches"],
            duplicate_batches=counters["duplicate_batches"],
            events=counters["events"],
            rejected=rejected,
            processes=processes,
        )

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

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


def _connect(path: str, readonly: bool, busy_timeout_ms: int) -> sqlite3.Connection:
    try:
        if readonly:
            if not os.path.isfile(path):
                raise StoreError(_missing(path))
            uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        else:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except OSError as exc:
        raise StoreError(f"cannot create repository {path}: {exc.strerror}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open repository {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"{path} is not an invoseq repository ({exc})") from exc
    return conn


def _missing(path: str) -> str:
    return f"no repository at {path} (run `cmr serve` or `tracer run` first)"


def _range_clause(wanted: SeqRange) -> tuple[str, tuple[bytes, ...]]:
    if wanted.hi is None:
        return "seq >= ?", (wanted.lo,)
    return "seq >= ? AND seq < ?", (wanted.lo, wanted.hi)


def _summary(conn: sqlite3.Connection, seq: bytes, start_ns: int) -> SequenceSummary:
    invocations, processes, running, incomplete = conn.execute(_COUNTS, (seq,)).fetchone()
    (threads,) = conn.execute(
        "SELECT count(*) FROM (SELECT DISTINCT puid, tid FROM starts WHERE seq = ?)", (seq,)
    ).fetchone()
    method, end_ns, module, qualname = conn.execute(_ROOT, (seq,)).fetchone()
    return SequenceSummary(
        seq=seq,
        root=qualified_name(module, qualname, method),
        start_ns=start_ns,
        end_ns=end_ns,
        invocations=invocations,
        threads=threads,
        processes=processes,
        status=sequence_status(running, incomplete),
    )


def _process_record(row: tuple[int, int, str, str, str, int, int, int]) -> ProcessRecord:
    puid, pid, host, platform_id, argv, ended, dropped, last_seen_ns = row
    return ProcessRecord(
        puid=puid,
        pid=pid,
        host=host,
        platform_id=platform_id,
        argv=tuple(json.loads(argv)),
        ended=bool(ended),
        dropped=dropped,
        last_seen_ns=last_seen_ns,
    )

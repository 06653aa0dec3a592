"""A repository in PostgreSQL, shared by any number of ``cmr serve`` nodes and readers.

Each node is stateless apart from the batches it is storing: a batch is one transaction, and
``ingest`` returns (so the server acknowledges) only after it committed. Two nodes that get the
same batch store it once (``postgres_ingest``). Event tables are partitioned by day and
``prune`` drops old partitions whole (``postgres_partitions``, ``postgres_prune``). The schema
is checked, and upgraded by a writer, when the store opens (``postgres_migrate``).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import psycopg
from psycopg import errors

from cmr.store import block_pages, listing_sql, single_rows
from cmr.store._samples import I64_MIN
from cmr.store.base import (
    Neighbours,
    OnStep,
    Outcome,
    PruneResult,
    SequenceData,
    SequenceQuery,
    SequenceSummary,
    StoreError,
    StoreStats,
)
from cmr.store.batch_index import PackingStore, Preparation, Prepared, write_each
from cmr.store.grouping import group_parts, only
from cmr.store.listing import select_lines
from cmr.store.postgres import blocks, single, summaries
from cmr.store.postgres.connect import Conn, connect, one_line, where
from cmr.store.postgres.ingest import create_stages, needed_days, write_batch
from cmr.store.postgres.migrate import check_readable, migrate
from cmr.store.postgres.partitions import create_partitions, day_window
from cmr.store.postgres.prune import prune
from cmr.store.postgres.read import load, neighbours, stats
from cmr.store.postgres.statements import (
    METHODS_BY_RECENT_SEQUENCE,
    NAMED_METHODS,
    SINGLE_ROW_METHODS,
)
from cmr.store.rules import SHOWN_MATCHES, check_limit, pick_match, seq_range
from cmr.store.single_rows import Written
from cmr.store.stored_batches import methods_of

#: How often a transaction that lost a deadlock or a race for a new partition is retried.
ATTEMPTS: Final = 4
_RETRIED: Final = (errors.DeadlockDetected, errors.SerializationFailure)
#: The error PostgreSQL raises for a row no partition takes: the partition is created, then
#: the batch stored again.
_NO_PARTITION: Final = errors.CheckViolation

T = TypeVar("T")


class PostgresStore(PackingStore):
    """A repository in a PostgreSQL database (``url``: a libpq URI). Thread-safe: one connection,
    used under a lock. ``readonly`` never creates or upgrades anything and fails clearly when
    the schema is missing. ``clock`` (wall-clock nanoseconds) tells reads how long a process has
    been silent, and places the window of partition days."""

    def __init__(
        self, url: str, *, readonly: bool = False, clock: Callable[[], int] = time.time_ns
    ) -> None:
        self.url = url
        self.name = where(url)
        self._readonly = readonly
        self._clock = clock
        self._lock = threading.Lock()
        #: This store's row in ``counters``: nodes never contend for one.
        self._node = secrets.randbits(63)
        self._closed = False
        self._conn: Conn | None = None
        with self._lock:
            self._connection()

    # -- write side -----------------------------------------------------------------------

    def ingest_prepared(self, group: Preparation, received_ns: int) -> list[Outcome]:
        outcomes = list(group.outcomes)
        if group.prepared:
            prepared = group.in_write_order()
            self._retry(lambda conn: self._write(conn, prepared, outcomes, received_ns))
        return outcomes

    def _write(
        self, conn: Conn, prepared: list[Prepared], outcomes: list[Outcome], received_ns: int
    ) -> None:
        """The prepared batches in one transaction (one commit, one WAL flush), their outcomes
        set; a day's partitions missing are made, and the transaction run again."""
        window = day_window(self._clock())
        batches: list[Written] = []  # (puid, batch_no, pack) of those written

        def write_one(ready: Prepared) -> bool:
            fresh = write_batch(
                conn,
                ready.batch,
                packed=ready.packed,
                samples=ready.samples,
                received_ns=received_ns,
                window=window,
                node=self._node,
            )
            if fresh:
                batches.append((ready.batch.puid, ready.batch.batch_no, ready.packed))
            return fresh

        def write() -> None:
            batches.clear()
            with conn.transaction():
                written = write_each(prepared, outcomes, write_one)
                if written:  # after every late End: a sequence several batches carry, once
                    rows = single.insert(conn, batches) if single_rows.ENABLED else []
                    stored = {row[0] for row in rows}
                    with conn.pipeline():
                        single.write_blocks(conn, rows)
                        single.write_batch_seqs(conn, batches, stored)
                        # cut to the other sequences first (``grouping.only``: fewer to merge)
                        packs = [only(p, p.seqs - stored) if stored else p for p in written]
                        summaries.store(conn, group_parts(packs))

        try:
            write()
        except _NO_PARTITION:
            days = set[tuple[str, int]]()
            for ready in prepared:
                days |= needed_days(ready.packed, ready.samples, window)
            create_partitions(conn, days)
            write()

    def record_rejected(self, reason: str, count: int = 1) -> None:
        def record(conn: Conn) -> None:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO rejected AS r VALUES (%s, %s) "
                    "ON CONFLICT (reason) DO UPDATE SET frames = r.frames + excluded.frames",
                    (reason, count),
                )

        self._retry(record)

    def prune(self, before_ns: int, *, on_step: OnStep | None = None) -> PruneResult:
        def run(conn: Conn) -> PruneResult:
            with conn.transaction():
                return prune(conn, before_ns, self._clock(), on_step)

        return self._retry(run)

    # -- read side ------------------------------------------------------------------------

    def list_sequences(
        self, limit: int, query: SequenceQuery | None = None
    ) -> list[SequenceSummary]:
        check_limit(limit)
        now = self._clock()
        with self._reading() as conn:
            plan = listing_sql.plan(
                query,
                listing_sql.POSTGRES,
                lambda sql, params: conn.execute(sql, params).fetchall(),
            )
            page = functools.partial(summaries.page, conn=conn, query=query, plan=plan, now=now)
            return select_lines(page, limit, query)

    def resolve_sequence(self, prefix: str) -> bytes:
        wanted = seq_range(prefix)
        where_clause = "seq >= %(lo)s" + ("" if wanted.hi is None else " AND seq < %(hi)s")
        params = {"lo": wanted.lo, "hi": wanted.hi}
        with self._reading() as conn:
            count = conn.execute(f"SELECT count(*) FROM sequences WHERE {where_clause}", params)
            found = count.fetchone()
            first = conn.execute(
                f"SELECT seq FROM sequences WHERE {where_clause} "
                f"ORDER BY seq LIMIT {SHOWN_MATCHES}",
                params,
            ).fetchall()
        matches = int(found[0]) if found else 0
        return pick_match(wanted, matches, [bytes(seq) for (seq,) in first])

    def neighbours(self, seqs: Sequence[bytes]) -> dict[bytes, Neighbours]:
        with self._reading() as conn:
            return neighbours(conn, seqs)

    def load_sequence(self, seq: bytes, *, samples: bool = True) -> SequenceData:
        now = self._clock()
        with self._reading() as conn:
            return load(conn, seq, now, samples=samples)

    def find_sequences(self, method: str, *, since_ns: int | None, limit: int) -> list[bytes]:
        check_limit(limit)
        since = I64_MIN if since_ns is None else since_ns
        found: list[bytes] = []
        with self._reading() as conn:
            wanted = {
                (int(puid), int(m))
                for puid, m in conn.execute(NAMED_METHODS, {"name": method}).fetchall()
            }
            if not wanted or limit == 0:
                return found
            # A server-side cursor: only as many rows are fetched as are read.
            with conn.cursor(name="methods_by_recent_sequence") as cursor:
                cursor.itersize = 256
                cursor.execute(METHODS_BY_RECENT_SEQUENCE, {"since": since})
                rows = heapq.merge(
                    cursor,
                    block_pages.newest_first(
                        conn.execute, blocks.LAYOUT, SINGLE_ROW_METHODS, since
                    ),
                    key=block_pages.start_and_id,
                    reverse=True,
                )
                for _start, seq_value, puid, blob in rows:
                    seq = bytes(seq_value)
                    if found and found[-1] == seq:
                        continue
                    if any((puid, m) in wanted for m in methods_of(bytes(blob))):
                        found.append(seq)
                        if len(found) == limit:
                            break
        return found

    def stats(self) -> StoreStats:
        now = self._clock()
        with self._reading() as conn:
            return stats(conn, now)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- plumbing -------------------------------------------------------------------------

    def _connection(self) -> Conn:
        """The open connection; a new one (checked like the first) after the server dropped
        the last, so a node outlives a database restart. Call under the lock."""
        if self._closed:
            raise StoreError(f"the repository {self.name} is closed")
        if self._conn is not None and not self._conn.broken:
            return self._conn
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        conn = connect(self.url)
        try:
            with self._errors():
                if self._readonly:
                    check_readable(conn, self.name)
                else:
                    migrate(conn, self.name)
                    create_stages(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Driver errors become one-line StoreErrors naming the repository."""
        try:
            yield
        except psycopg.Error as exc:
            raise StoreError(f"repository {self.name}: {one_line(exc, self.url)}") from None

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Conn]:
        """One read-only transaction that sees one snapshot of the repository."""
        with self._lock, self._errors():
            conn = self._connection()
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield conn

    def _retry(self, work: Callable[[Conn], T]) -> T:
        """Run ``work`` (which holds its own transactions) under the lock, again when it lost
        a deadlock to another node, raced it to create a partition, or the server dropped the
        connection (a new one is opened)."""
        with self._lock, self._errors():
            for attempt in range(1, ATTEMPTS + 1):
                conn = self._connection()
                try:
                    return work(conn)
                except (*_RETRIED, _NO_PARTITION, errors.DuplicateTable):
                    if attempt == ATTEMPTS:
                        raise
                except psycopg.OperationalError:
                    if not conn.broken or attempt == ATTEMPTS:
                        raise  # the connection lives: the statement itself failed
            raise AssertionError("unreachable")  # pragma: no cover


def _rows_of(conn: Conn) -> listing_sql.Rows:
    def rows(sql: str, params: Mapping[str, object]) -> list[tuple[Any, ...]]:
        return conn.execute(sql, params).fetchall()

    return rows

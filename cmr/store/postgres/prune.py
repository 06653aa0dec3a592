"""Retention in PostgreSQL (``Store.prune``), in the caller's transaction.

As in SQLite, the sequences that started before the cutoff go with their index rows, listing
lines and hand-offs, and a stored batch goes once no sequence it holds is left, in the side
tables or as a single row (``cmr.store.postgres.single``; a batch may hold old and new
sequences). Hand-offs and samples are partitioned by day: whole day partitions older than the
cutoff are dropped (no row is read or deleted one by one) and only the partial day's rows are
deleted one by one.
"""

from __future__ import annotations

from psycopg import sql

from cmr.store.base import OnStep, PruneResult
from cmr.store.postgres import blocks
from cmr.store.postgres.blocks import PRUNED_SINGLES
from cmr.store.postgres.connect import Conn
from cmr.store.postgres.partitions import DAY_NS, FUTURE, PAST_DAYS, droppable
from cmr.store.rules import step_counter

#: What a process leaves behind once nothing else names it: deleted with it.
_PROCESS_TABLES = (
    "methods",
    "threads",
    "frames",
    "sample_threads",
    "samplers",
    "late_ends",
    "late_attrs",
    "lost_windows",
)
#: What a sequence leaves behind, deleted with it.
_SEQUENCE_TABLES = (
    "batch_seqs",
    "handoffs",
    "lost_seqs",
    "seq_roots",
    "seq_threads",
    "seq_entries",
    "open_calls",
)


#: ``prune``'s steps, for progress: the sequences, their tables, the partitions dropped, samples,
#: batches, late ends, late attributes, processes.
_STEPS = 1 + len(_SEQUENCE_TABLES) + 6


def prune(conn: Conn, before_ns: int, now_ns: int, on_step: OnStep | None = None) -> PruneResult:
    step = step_counter(on_step, _STEPS)

    conn.execute("CREATE TEMP TABLE pruned (seq bytea PRIMARY KEY) ON COMMIT DROP")
    # Sorted: the same order ingest locks sequence rows in.
    # The single rows, which the start index does not hold, by their blocks.
    sequences = conn.execute(
        "WITH gone AS (DELETE FROM sequences WHERE seq IN ("
        "  SELECT seq FROM sequences WHERE seq IN ("
        "    SELECT seq FROM sequences WHERE start_ns < %(before)s AND one_batch IS NULL"
        f"   UNION ALL {PRUNED_SINGLES}"
        "  ) ORDER BY seq FOR UPDATE"
        ") RETURNING seq) INSERT INTO pruned SELECT seq FROM gone",
        {"before": before_ns},
    ).rowcount
    conn.execute("ANALYZE pruned")
    step()
    for table in _SEQUENCE_TABLES:
        if sequences:
            conn.execute(
                sql.SQL("DELETE FROM {} t USING pruned p WHERE t.seq = p.seq").format(
                    sql.Identifier(table)
                )
            )
        step()
    samples = 0
    for name in droppable(conn, before_ns):
        if name.startswith("samples_"):
            samples += _count(conn, name)
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
    step()
    # Rows older than the cutoff sit in partitions up to its day, or up to the oldest day of
    # the window when they were clamped (postgres_partitions), or in FUTURE.
    last_day = max((before_ns - 1) // DAY_NS, now_ns // DAY_NS - PAST_DAYS)
    days = {"last": last_day, "future": FUTURE, "before": before_ns}
    samples += conn.execute(
        "DELETE FROM samples WHERE t_ns < %(before)s AND (day <= %(last)s OR day = %(future)s)",
        days,
    ).rowcount
    step()
    conn.execute(
        "DELETE FROM batches b WHERE received_ns < %s AND NOT EXISTS (SELECT 1 FROM batch_seqs s "
        "WHERE s.puid = b.puid AND s.batch_no = b.batch_no) "
        "AND NOT EXISTS (SELECT 1 FROM sequences q "
        "WHERE q.one_puid = b.puid AND q.one_batch = b.batch_no)",
        (before_ns,),
    )
    blocks.prune(conn, before_ns)
    step()
    # An End before the cutoff belongs to an invocation that started before it, so its sequence
    # was pruned.
    conn.execute("DELETE FROM late_ends WHERE end_ns < %s", (before_ns,))
    step()
    conn.execute(
        "DELETE FROM late_attrs a WHERE NOT EXISTS (SELECT 1 FROM batches b "
        "WHERE b.puid = a.puid AND b.batch_no = a.batch_no)"
    )
    step()
    processes = _prune_processes(conn, before_ns)
    step()
    return PruneResult(sequences=sequences, samples=samples, processes=processes)


def _prune_processes(conn: Conn, before_ns: int) -> int:
    """Processes last seen before the cutoff that nothing left names, with what they sent."""
    conn.execute("CREATE TEMP TABLE pruned_processes (puid bigint PRIMARY KEY) ON COMMIT DROP")
    gone = conn.execute(
        "WITH gone AS (DELETE FROM processes p WHERE p.puid IN ("
        "  SELECT puid FROM processes WHERE last_seen_ns < %s"
        "    AND NOT EXISTS (SELECT 1 FROM batch_seqs s WHERE s.puid = processes.puid)"
        "    AND NOT EXISTS (SELECT 1 FROM sequences q"
        "      WHERE q.one_puid = processes.puid AND q.one_batch IS NOT NULL)"
        "    AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.puid = processes.puid)"
        "    AND NOT EXISTS (SELECT 1 FROM handoffs h WHERE h.puid = processes.puid)"
        "    AND NOT EXISTS (SELECT 1 FROM samples m WHERE m.puid = processes.puid)"
        "    AND NOT EXISTS (SELECT 1 FROM lost_seqs l WHERE l.puid = processes.puid)"
        "  ORDER BY puid FOR UPDATE"
        ") RETURNING puid) INSERT INTO pruned_processes SELECT puid FROM gone",
        (before_ns,),
    ).rowcount
    if gone:
        for table in _PROCESS_TABLES:
            conn.execute(
                sql.SQL("DELETE FROM {} t USING pruned_processes g WHERE t.puid = g.puid").format(
                    sql.Identifier(table)
                )
            )
    return gone


def _count(conn: Conn, name: str) -> int:
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))).fetchone()
    return int(row[0]) if row else 0

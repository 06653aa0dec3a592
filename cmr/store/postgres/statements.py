"""The PostgreSQL repository's statements (its schema, as migrations, is ``schema``'s), kept
apart from the code that runs them."""

from __future__ import annotations

from typing import Final

from cmr.store.listing_sql import PICKED_ROOT_COLUMNS, PICKED_ROOT_FROM
from cmr.store.postgres.schema import LISTING_KEYS_COLUMNS, LISTING_KEYS_JOINS

#: As in SQLite: the heartbeat interval comes from the latest batch received; everything else a
#: process says about itself is kept from its first batch.
UPSERT_PROCESS: Final = """
    INSERT INTO processes AS p VALUES (
        %(puid)s, %(pid)s, %(host)s, %(platform_id)s, %(argv)s, %(clock_offset_ns)s,
        %(started_ns)s, %(ended)s, %(dropped)s, %(last_seen_ns)s, %(heartbeat_ms)s)
    ON CONFLICT (puid) DO UPDATE SET
        ended = p.ended OR excluded.ended,
        dropped = greatest(p.dropped, excluded.dropped),
        last_seen_ns = greatest(p.last_seen_ns, excluded.last_seen_ns),
        heartbeat_ms = CASE WHEN excluded.last_seen_ns >= p.last_seen_ns
                            THEN excluded.heartbeat_ms ELSE p.heartbeat_ms END"""
UPSERT_COUNTERS: Final = """
    INSERT INTO counters AS c VALUES (%s, %s, %s, %s, %s)
    ON CONFLICT (node) DO UPDATE SET
        batches = c.batches + excluded.batches,
        duplicate_batches = c.duplicate_batches + excluded.duplicate_batches,
        events = c.events + excluded.events,
        samples = c.samples + excluded.samples"""
UPSERT_SAMPLER: Final = """
    INSERT INTO samplers AS s VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (puid) DO UPDATE SET
        mode = excluded.mode, interval_ms = excluded.interval_ms, ticks = excluded.ticks,
        late_ticks = excluded.late_ticks, cost_ns = excluded.cost_ns,
        current_interval_ns = excluded.current_interval_ns,
        longest_interval_ns = excluded.longest_interval_ns,
        dropped_samples = excluded.dropped_samples
    WHERE excluded.ticks >= s.ticks"""
UPSERT_SAMPLE_THREADS: Final = """
    INSERT INTO sample_threads AS t
    SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[]) ORDER BY 1, 2
    ON CONFLICT (puid, tid) DO UPDATE
    SET longest_ns = greatest(t.longest_ns, excluded.longest_ns)"""

#: The name a listing shows for the method of row ``{row}`` (its ``puid`` and ``method``:
#: ``module.qualname``), NULL while the method is not described.
METHOD_NAME_OF: Final = """(
    SELECT CASE WHEN m.module <> '' THEN m.module || '.' || m.qualname ELSE m.qualname END
    FROM methods m WHERE m.puid = {row}.puid AND m.method = {row}.method)"""
#: Rows are sorted by seq, so concurrent nodes lock shared sequence rows in one order. A
#: sequence counts the Starts of every batch that brought some (``cmr.store.summaries``). A new
#: sequence's listing keys come from its group's root candidate, bound with it (its method's
#: name looked up, and its late End only when it has not ended); a sequence stored before takes
#: them from its stored candidate (the join), as does one whose open root a late End of the
#: group ends (the second part of ``batch``, always stored before). Joining every row to
#: ``seq_roots`` and ``late_ends`` cost a request-sized sequence more than storing it (issue 33).
#: A single row stored before (``cmr.store.postgres.single``) is locked and left as it is, and
#: its id returned: the caller moves it to the side tables and writes its row again.
UPSERT_SEQUENCES: Final = f"""
    WITH batch AS (
        SELECT seq, min(start_ns) AS start_ns, sum(invocations)::bigint AS invocations,
               min(root_name) AS root_name, min(end_ns) AS end_ns, min(error) AS error
        FROM (
            SELECT b.seq, b.start_ns, b.invocations,
                CASE WHEN b.decided <> 0 THEN {METHOD_NAME_OF.format(row="b")} END,
                coalesce(b.end_ns, (
                    SELECT l.end_ns FROM late_ends l WHERE l.puid = b.puid AND l.iid = b.iid)),
                CASE WHEN b.end_ns IS NULL THEN (
                    SELECT l.error FROM late_ends l WHERE l.puid = b.puid AND l.iid = b.iid)
                ELSE b.error END
            FROM unnest(%b::bytea[], %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[],
                        %b::bigint[], %b::bigint[], %b::bigint[], %b::text[])
                AS b (seq, start_ns, invocations, decided, puid, iid, method, end_ns, error)
            UNION ALL
            SELECT o.seq, q.start_ns, 0, NULL, NULL, NULL
            FROM unnest(%b::bigint[], %b::bigint[]) AS k (puid, iid)
            JOIN open_calls o ON o.puid = k.puid AND o.iid = k.iid
            JOIN seq_roots r ON r.seq = o.seq AND r.puid = k.puid AND r.iid = k.iid
            JOIN sequences q ON q.seq = o.seq
        ) AS u (seq, start_ns, invocations, root_name, end_ns, error)
        GROUP BY seq
    ), written AS (
        INSERT INTO sequences AS q (seq, start_ns, invocations, root_name, end_ns, error)
        SELECT seq, start_ns, invocations, root_name, end_ns, error FROM batch
        ORDER BY 1
        ON CONFLICT (seq) DO UPDATE SET
            start_ns = least(q.start_ns, excluded.start_ns),
            invocations = q.invocations + excluded.invocations,
            (root_name, end_ns, error) = (
                SELECT {LISTING_KEYS_COLUMNS} FROM seq_roots r {LISTING_KEYS_JOINS}
                WHERE r.seq = excluded.seq)
        WHERE q.one_batch IS NULL
        RETURNING seq
    )
    SELECT b.seq FROM batch b WHERE NOT EXISTS (SELECT 1 FROM written w WHERE w.seq = b.seq)"""
_ROOT_SET: Final = """
        untrue = excluded.untrue, handed = excluded.handed, start_ns = excluded.start_ns,
        puid = excluded.puid, iid = excluded.iid, method = excluded.method,
        end_ns = excluded.end_ns, error = excluded.error
    WHERE (excluded.untrue, excluded.handed, excluded.start_ns, excluded.puid, excluded.iid)"""
_STORED_RANK: Final = "(r.untrue, r.handed, r.start_ns, r.puid, r.iid)"
#: A root candidate upserted into ``seq_roots AS r``: the lowest ``root_rank`` wins; an equal
#: one (the same Start again) changes nothing.
ROOT_RANK_UPDATE: Final = f"{_ROOT_SET} < {_STORED_RANK}"
#: The same for a candidate stored before the one it meets (a single row's root, moved to the
#: side tables after the group wrote its candidates: ``cmr.store.postgres.single``): an equal
#: one is the same Start, and the first stored wins.
EARLIER_ROOT_UPDATE: Final = f"{_ROOT_SET} <= {_STORED_RANK}"
UPSERT_ROOTS: Final = f"""
    INSERT INTO seq_roots AS r
    SELECT * FROM unnest(%b::bytea[], %b::integer[], %b::integer[], %b::bigint[],
                         %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[], %b::text[])
    ORDER BY 1
    ON CONFLICT (seq) DO UPDATE SET {ROOT_RANK_UPDATE}"""
#: An invocation is opened unless its End came first (a late End already stored).
OPEN_CALLS: Final = """
    INSERT INTO open_calls
    SELECT o.puid, o.iid, o.seq
    FROM unnest(%b::bigint[], %b::bigint[], %b::bytea[]) AS o (puid, iid, seq)
    WHERE NOT EXISTS (SELECT 1 FROM late_ends l WHERE l.puid = o.puid AND l.iid = o.iid)
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING"""
#: The listing lines' stored parts of the sequences a page picks (``listing_sql.picked``: the
#: statement is put in place of {picked}), in no order. A single row (``q.one_batch`` set:
#: ``cmr.store.postgres.single``) has no ``seq_roots`` row: its root is on its row (a true root,
#: decided, ended: its end and exception are the row's), on one thread of one process.
SUMMARIES_OF_PICKED: Final = f"""
    SELECT s.seq, s.start_ns, s.invocations, {PICKED_ROOT_COLUMNS},
           CASE WHEN q.one_batch IS NOT NULL THEN 1
                ELSE (SELECT count(*) FROM seq_threads t WHERE t.seq = s.seq) END,
           CASE WHEN q.one_batch IS NOT NULL THEN 1
                ELSE (SELECT count(DISTINCT t.puid) FROM seq_threads t WHERE t.seq = s.seq) END,
           EXISTS (SELECT 1 FROM lost_seqs x WHERE x.seq = s.seq)
           OR EXISTS (SELECT 1 FROM lost_windows LIMIT 1) AND EXISTS (
               SELECT 1 FROM (
                   SELECT t.puid FROM seq_threads t WHERE t.seq = s.seq
                   UNION ALL SELECT q.one_puid WHERE q.one_batch IS NOT NULL) t
               JOIN lost_windows w ON w.puid = t.puid
               WHERE w.first_ns <= coalesce(q.end_ns, w.first_ns) AND w.last_ns >= q.start_ns)
    {PICKED_ROOT_FROM}"""
#: The processes whose windows of unnamed drops sequence %(seq)s overlaps (as in SQLite:
#: ``sqlite_schema.LOST_WINDOWS_OF``), with the first and last times of those windows.
LOST_WINDOWS_OF: Final = """
    SELECT w.puid, min(w.first_ns), max(w.last_ns)
    FROM sequences s
    JOIN (SELECT puid FROM seq_threads WHERE seq = %(seq)s
          UNION SELECT one_puid FROM sequences
          WHERE seq = %(seq)s AND one_batch IS NOT NULL) t ON true
    JOIN lost_windows w ON w.puid = t.puid
    WHERE s.seq = %(seq)s AND w.first_ns <= coalesce(s.end_ns, w.first_ns)
      AND w.last_ns >= s.start_ns
    GROUP BY w.puid"""
#: The entries of the sequences %(seqs)s whose hand-off nobody here recorded, with their
#: processes and ends.
REMOTE_ENTRIES: Final = """
    SELECT e.seq, e.puid, coalesce(e.end_ns, l.end_ns) FROM seq_entries e
    LEFT JOIN late_ends l ON l.puid = e.puid AND l.iid = e.iid
    WHERE e.seq = ANY(%(seqs)s) AND NOT EXISTS (SELECT 1 FROM handoffs h WHERE h.hid = e.hid)"""
PROCESS_COLUMNS: Final = (
    "puid, pid, host, platform_id, argv, ended, dropped, last_seen_ns, heartbeat_ms"
)
#: The stored batches holding a sequence's Starts or Handoffs in a repository before single
#: rows (migration 10), in (puid, batch_no) order: what the upgrades before it read.
SIDE_TABLE_BATCHES: Final = """
    SELECT b.puid, b.batch_no, b.clock_offset_ns, b.chunks
    FROM batch_seqs s JOIN batches b ON b.puid = s.puid AND b.batch_no = s.batch_no
    WHERE s.seq = %(seq)s ORDER BY s.puid, s.batch_no"""
#: The stored batches holding a sequence's Starts or Handoffs, in (puid, batch_no) order: a
#: single row's is on its row.
SEQUENCE_BATCHES: Final = """
    SELECT b.puid, b.batch_no, b.clock_offset_ns, b.chunks FROM (
        SELECT puid, batch_no FROM batch_seqs WHERE seq = %(seq)s
        UNION ALL SELECT one_puid, one_batch FROM sequences
        WHERE seq = %(seq)s AND one_batch IS NOT NULL) s
    JOIN batches b ON b.puid = s.puid AND b.batch_no = s.batch_no
    ORDER BY b.puid, b.batch_no"""
#: The late Ends of the invocations (puid, iid) given as two arrays.
LATE_ENDS: Final = """
    SELECT l.puid, l.iid, l.end_ns, l.error
    FROM unnest(%b::bigint[], %b::bigint[]) AS k (puid, iid)
    JOIN late_ends l ON l.puid = k.puid AND l.iid = k.iid"""
HANDOFF_COLUMNS: Final = "hid, puid, parent, kind, method, submitted_ns"
#: The hand-offs recorded in the sequence, and those its invocations continue (found by hid
#: alone, %(hids)s); the earliest day's row of a hid wins.
SEQUENCE_HANDOFFS: Final = f"""
    SELECT DISTINCT ON (hid) {HANDOFF_COLUMNS} FROM (
        SELECT * FROM handoffs WHERE seq = %(seq)s
        UNION ALL
        SELECT * FROM handoffs WHERE hid = ANY(%(hids)s)
    ) found ORDER BY hid, day"""
#: _samples.overlaps in SQL (see sqlite_schema.SAMPLES_IN_WINDOW).
SAMPLES_IN_WINDOW: Final = """
    SELECT DISTINCT ON (t_ns) t_ns, weight, duration_ns, cpu_ns, stack FROM samples
    WHERE puid = %(puid)s AND tid = %(tid)s AND t_ns > %(lowest)s AND t_ns < %(end)s
      AND t_ns + greatest(duration_ns, 1) > %(start)s
    ORDER BY t_ns, day"""
#: base.names_method in SQL: the methods %(name)s names.
NAMED_METHODS: Final = """
    SELECT puid, method FROM methods
    WHERE qualname = %(name)s OR (module != '' AND module || '.' || qualname = %(name)s)"""
#: The methods each sequence ran, most recent sequence first (from %(since)s):
#: ``find_sequences`` reads it until it has found enough sequences running a wanted method. The
#: single rows, which the start index does not hold, are read by their blocks
#: (``block_pages.newest_first``) beside it.
METHODS_BY_RECENT_SEQUENCE: Final = """
    SELECT q.start_ns, q.seq, m.puid, m.methods
    FROM sequences q JOIN batch_seqs m ON m.seq = q.seq
    WHERE q.start_ns >= %(since)s AND q.one_batch IS NULL AND m.methods IS NOT NULL
    ORDER BY q.start_ns DESC, q.seq DESC"""
#: The same columns of a single row (``block_pages.newest_first``).
SINGLE_ROW_METHODS: Final = "one_puid, one_methods"

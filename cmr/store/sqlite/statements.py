"""The SQLite repository's statements (its schema and upgrades are ``schema``'s), kept apart
from the code that runs them."""

from __future__ import annotations

from cmr.store.listing_sql import PICKED_ROOT_COLUMNS, PICKED_ROOT_FROM

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final

#: The heartbeat interval comes from the latest batch received (the process may change it);
#: everything else a process says about itself is kept from its first batch.
UPSERT_PROCESS: Final = """
    INSERT INTO processes (
        puid, pid, host, platform_id, argv, clock_offset_ns, started_ns,
        ended, dropped, last_seen_ns, heartbeat_ms
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (puid) DO UPDATE SET
        ended = max(ended, excluded.ended),
        dropped = max(dropped, excluded.dropped),
        last_seen_ns = max(last_seen_ns, excluded.last_seen_ns),
        heartbeat_ms = CASE WHEN excluded.last_seen_ns >= last_seen_ns
                            THEN excluded.heartbeat_ms ELSE heartbeat_ms END"""
#: A sequence's listing keys (``LISTING_KEYS_SCHEMA``) from its root candidate ``r``, its late
#: End ``l`` and its method ``m``, in the order the statements below set them.
_KEYS: Final = """
    CASE WHEN r.untrue = 0 AND r.handed = 0 AND m.qualname IS NOT NULL THEN
        CASE WHEN m.module != '' THEN m.module || '.' || m.qualname ELSE m.qualname END
    END,
    coalesce(r.end_ns, l.end_ns),
    CASE WHEN r.end_ns IS NULL THEN l.error ELSE r.error END
    FROM seq_roots r
    LEFT JOIN late_ends l ON l.puid = r.puid AND l.iid = r.iid
    LEFT JOIN methods m ON m.puid = r.puid AND m.method = r.method"""
#: A group's sequence (:seq, :start its earliest Start, :count its Starts), written once per
#: group with its listing keys: run after the group's root candidates and methods are stored.
#: A new sequence's candidate is the group's (:puid, :iid, :method, :decided when it is a true
#: root, :end and :error), so its keys come from the parameters, with a lookup of the method's
#: name and, only when the candidate has not ended, of its late End: far cheaper than the join
#: (issue 33). A sequence stored before takes its keys from its stored candidate, which the
#: group's may not have displaced (the join, ``_KEYS``).
#: Parameters by name, bound from dicts: numbered ones bound from a tuple are deprecated since
#: Python 3.12 (an error in 3.14).
UPSERT_SEQUENCE: Final = f"""
    INSERT INTO sequences (seq, start_ns, invocations, root_name, end_ns, error)
    VALUES (
        :seq, :start, :count,
        CASE WHEN :decided THEN (
            SELECT CASE WHEN module != '' THEN module || '.' || qualname ELSE qualname END
            FROM methods WHERE puid = :puid AND method = :method) END,
        coalesce(:end, (SELECT end_ns FROM late_ends WHERE puid = :puid AND iid = :iid)),
        CASE WHEN :end IS NULL
             THEN (SELECT error FROM late_ends WHERE puid = :puid AND iid = :iid)
             ELSE :error END)
    ON CONFLICT (seq) DO UPDATE SET
        start_ns = min(start_ns, excluded.start_ns),
        invocations = invocations + excluded.invocations,
        (root_name, end_ns, error) = (SELECT {_KEYS} WHERE r.seq = excluded.seq)"""
#: The lowest ``root_rank`` wins; an equal one (the same Start again) changes nothing.
UPSERT_ROOT: Final = """
    INSERT INTO seq_roots VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (seq) DO UPDATE SET
        untrue = excluded.untrue, handed = excluded.handed, start_ns = excluded.start_ns,
        puid = excluded.puid, iid = excluded.iid, method = excluded.method,
        end_ns = excluded.end_ns, error = excluded.error
    WHERE (excluded.untrue, excluded.handed, excluded.start_ns, excluded.puid, excluded.iid)
        < (seq_roots.untrue, seq_roots.handed, seq_roots.start_ns, seq_roots.puid, seq_roots.iid)"""
#: An invocation is opened unless its End came first (a late End already stored).
OPEN_CALL: Final = """
    INSERT OR IGNORE INTO open_calls SELECT :puid, :iid, :seq
    WHERE NOT EXISTS (SELECT 1 FROM late_ends WHERE puid = :puid AND iid = :iid)"""
#: Every sequence's listing keys from its root candidate (upgrading a file).
LISTING_KEYS: Final = f"""
    UPDATE sequences SET (root_name, end_ns, error) = (
        SELECT {_KEYS} WHERE r.seq = sequences.seq)"""
#: A late End (:puid, :iid, :end, :error) that ends the root of an open sequence sets its end:
#: run before the End closes the open invocation (the lookup goes through ``open_calls``).
LATE_ROOT_END: Final = """
    UPDATE sequences SET end_ns = :end, error = :error
    WHERE seq = (SELECT o.seq FROM open_calls o
                 JOIN seq_roots r ON r.seq = o.seq AND r.puid = o.puid AND r.iid = o.iid
                 WHERE o.puid = :puid AND o.iid = :iid)"""
#: The listing lines' stored parts of the sequences a page picks (``listing_sql.picked``: the
#: statement is put in place of {picked}), in no order, and whether each is a single row
#: (``q.one_batch`` set: ``cmr.store.sqlite.single``): one has no ``seq_roots`` row, its root is
#: on its row (a true root, decided, ended: its end and exception are the row's).
SUMMARIES_OF_PICKED: Final = f"""
    SELECT s.seq, s.start_ns, s.invocations, {PICKED_ROOT_COLUMNS}, q.one_batch IS NOT NULL
    {PICKED_ROOT_FROM}"""
#: The processes whose windows of unnamed drops sequence :seq overlaps (it ran on them, from
#: its earliest Start to its root's end, or on if open: ``rules.overlaps_window``), with the
#: first and last times of the windows it overlaps.
LOST_WINDOWS_OF: Final = """
    SELECT w.puid, min(w.first_ns), max(w.last_ns)
    FROM sequences s
    JOIN (SELECT puid FROM seq_threads WHERE seq = :seq
          UNION SELECT one_puid FROM sequences WHERE seq = :seq AND one_batch IS NOT NULL) t
    JOIN lost_windows w ON w.puid = t.puid
    WHERE s.seq = :seq AND w.first_ns <= coalesce(s.end_ns, w.first_ns) AND w.last_ns >= s.start_ns
    GROUP BY w.puid"""
#: Whether sequence :seq is lossy: named by a process, or in a window of unnamed drops.
LOSSY: Final = f"""
    SELECT EXISTS (SELECT 1 FROM lost_seqs WHERE seq = :seq)
        OR EXISTS (SELECT 1 FROM lost_windows LIMIT 1) AND EXISTS ({LOST_WINDOWS_OF})"""
#: How many threads and processes a sequence ran on (a single row: one of each, not asked).
THREAD_COUNTS: Final = "SELECT count(*), count(DISTINCT puid) FROM seq_threads WHERE seq = ?"
#: A sequence's open invocations, per process.
#: The entries of :seq whose hand-off nobody here recorded, with their processes and ends.
REMOTE_ENTRIES: Final = """
    SELECT e.puid, coalesce(e.end_ns, l.end_ns) FROM seq_entries e
    LEFT JOIN late_ends l ON l.puid = e.puid AND l.iid = e.iid
    WHERE e.seq = ? AND NOT EXISTS (SELECT 1 FROM handoffs h WHERE h.hid = e.hid)"""
PROCESS_COLUMNS: Final = (
    "puid, pid, host, platform_id, argv, ended, dropped, last_seen_ns, heartbeat_ms"
)
#: The stored batches holding sequence :seq's Starts or Handoffs, in (puid, batch_no) order: a
#: single row's is on its row. Ordered by the keys' side of the join, which the primary keys
#: already give in that order: ordered by ``b``'s, SQLite sorted the rows, blobs and all, in a
#: temporary b-tree, which spilled a big sequence's 49 MB to a temporary file and back (three
#: quarters of the read's time).
SEQUENCE_BATCHES: Final = """
    SELECT s.puid, s.batch_no, b.clock_offset_ns, b.chunks FROM (
        SELECT puid, batch_no FROM batch_seqs WHERE seq = :seq
        UNION ALL SELECT one_puid, one_batch FROM sequences
        WHERE seq = :seq AND one_batch IS NOT NULL) s
    JOIN batches b ON b.puid = s.puid AND b.batch_no = s.batch_no
    ORDER BY s.puid, s.batch_no"""

#: Whether a single row still names batch (x.puid, x.batch_no) or, with the batch's condition
#: left out, process x.puid: the rows of the blocks holding that batch's single rows
#: (``single_block_batches``, a seek, then each block's rowid range: after ``prune`` deleted the
#: old sequences, what is left of them).
_SINGLE_ROW_OF: Final = """
    SELECT 1 FROM single_block_batches x
    JOIN sequences q ON q.rowid BETWEEN x.first_row AND x.last_row
    WHERE x.puid = {puid} {batch} AND q.one_puid = x.puid AND q.one_batch = x.batch_no"""
#: ``prune``: the batches received before :1 that no sequence left holds, in the side tables or
#: as a single row.
PRUNE_BATCHES: Final = f"""
    DELETE FROM batches WHERE received_ns < ?
    AND NOT EXISTS (SELECT 1 FROM batch_seqs s
                    WHERE s.puid = batches.puid AND s.batch_no = batches.batch_no)
    AND NOT EXISTS ({
    _SINGLE_ROW_OF.format(puid="batches.puid", batch="AND x.batch_no = batches.batch_no")
})"""
#: ``prune``: the processes last heard from before :1 that nothing left names.
PRUNED_PROCESSES: Final = f"""
    SELECT puid FROM processes p WHERE last_seen_ns < ?
    AND NOT EXISTS (SELECT 1 FROM batch_seqs s WHERE s.puid = p.puid)
    AND NOT EXISTS ({_SINGLE_ROW_OF.format(puid="p.puid", batch="")})
    AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.puid = p.puid)
    AND NOT EXISTS (SELECT 1 FROM handoffs h WHERE h.puid = p.puid)
    AND NOT EXISTS (SELECT 1 FROM samples m WHERE m.puid = p.puid)
    AND NOT EXISTS (SELECT 1 FROM lost_seqs l WHERE l.puid = p.puid)"""

#: A sampler report is cumulative: the one with the most ticks is the latest, whatever order
#: batches arrive in.
UPSERT_SAMPLER: Final = """
    INSERT INTO samplers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (puid) DO UPDATE SET
        mode = excluded.mode, interval_ms = excluded.interval_ms, ticks = excluded.ticks,
        late_ticks = excluded.late_ticks, cost_ns = excluded.cost_ns,
        current_interval_ns = excluded.current_interval_ns,
        longest_interval_ns = excluded.longest_interval_ns,
        dropped_samples = excluded.dropped_samples
    WHERE excluded.ticks >= samplers.ticks"""
UPSERT_SAMPLE_THREAD: Final = """
    INSERT INTO sample_threads VALUES (?, ?, ?)
    ON CONFLICT (puid, tid) DO UPDATE SET longest_ns = max(longest_ns, excluded.longest_ns)"""
#: _samples.overlaps in SQL: the samples of thread (:puid, :tid) whose span meets the window
#: [:start, :end). A sample starts at most the thread's longest span before the window, which
#: bounds the index range read (:lowest = :start - max(longest, 1)).
SAMPLES_IN_WINDOW: Final = """
    SELECT t_ns, weight, duration_ns, cpu_ns, stack FROM samples
    WHERE puid = :puid AND tid = :tid AND t_ns > :lowest AND t_ns < :end
      AND t_ns + max(duration_ns, 1) > :start
    ORDER BY t_ns"""
#: base.names_method in SQL: the methods :name names.
NAMED_METHODS: Final = """
    SELECT puid, method FROM methods
    WHERE qualname = :name OR (module != '' AND module || '.' || qualname = :name)"""
#: The methods each sequence ran, most recent sequence first (from :since): ``find_sequences``
#: reads it until it has found enough sequences running a wanted method. The single rows, which
#: the start index does not hold, are read by their blocks (``blocks.newest_first``) beside it.
METHODS_BY_RECENT_SEQUENCE: Final = """
    SELECT q.start_ns, q.seq, m.puid, m.methods
    FROM sequences q JOIN batch_seqs m ON m.seq = q.seq
    WHERE q.start_ns >= :since AND q.one_batch IS NULL AND m.methods IS NOT NULL
    ORDER BY q.start_ns DESC, q.seq DESC"""
#: The same columns of a single row (``blocks.newest_first``).
SINGLE_ROW_METHODS: Final = "one_puid, one_methods"

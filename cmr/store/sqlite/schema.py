"""The SQLite repository's schema and statements, kept apart from the code that runs them.

Version 2 added hand-offs, version 3 each process's heartbeat interval, version 4 stack samples,
their frames and each process's sampler report, version 5 the sequences a process dropped events
of: each purely additive. Version 6 stores events as their batches arrived (``cmr.store.packed``)
instead of a row per Start and End; ``sqlite_migrate`` moves an older file's rows into that form
when it is opened for writing (``UPGRADES`` then the move). Version 7 keeps each sequence's
listing line at ingest (``cmr.store.summaries``); an older file's are computed when it is
upgraded. Version 8 adds the exception the root raised to the listing line (its roots are
computed again on upgrade). Version 9 keeps each sequence's listing keys (its root's name, end
and exception) on its row, indexed, so that ``cmr ls --root/--min-duration/--status/--sort
duration`` are served by index (``cmr.store.listing``). Version 10 adds the sampler's paced
interval to each process's sampler report (additive: 0 for the reports stored before). Version
11 keeps the methods a sequence ran in a batch on its ``batch_seqs`` row (same key) instead of a
table of its own: one B-tree row less per sequence and batch (issue 33). Version 12 adds the
time windows of drops whose sequences a process could not name (``lost_windows``, additive).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final

SCHEMA_VERSION: Final = 12

#: Version 2 added hand-offs. The change is purely additive, so a version 1 file opened for
#: writing is upgraded in place; the statements are shared with a fresh schema.
HANDOFFS_SCHEMA: Final = (
    """CREATE TABLE handoffs (
        hid INTEGER PRIMARY KEY,
        seq BLOB NOT NULL, puid INTEGER NOT NULL, parent INTEGER NOT NULL,
        kind TEXT NOT NULL, method INTEGER NOT NULL, submitted_ns INTEGER NOT NULL
    )""",
    "CREATE INDEX handoffs_by_seq ON handoffs (seq)",
)
#: Version 3 added the heartbeat interval a process promised (0 for processes stored before).
#: A fresh schema runs the same statement, so old and new files have the same column order.
HEARTBEAT_SCHEMA: Final = (
    "ALTER TABLE processes ADD COLUMN heartbeat_ms INTEGER NOT NULL DEFAULT 0",
)
#: Version 4 added stack samples. ``samples`` is keyed by thread and time, so a sequence reads
#: the samples of its threads by index range; ``sample_threads`` keeps the longest span of each
#: thread's samples, which bounds how far before a window a sample overlapping it can start.
#: ``stack`` is msgpack ``[[frame ids], [lines]]``, outermost first.
SAMPLES_SCHEMA: Final = (
    """CREATE TABLE frames (
        puid INTEGER NOT NULL, frame INTEGER NOT NULL,
        file TEXT NOT NULL, function TEXT NOT NULL, line INTEGER NOT NULL,
        PRIMARY KEY (puid, frame)
    ) WITHOUT ROWID""",
    """CREATE TABLE samples (
        puid INTEGER NOT NULL, tid INTEGER NOT NULL, t_ns INTEGER NOT NULL,
        weight INTEGER NOT NULL, duration_ns INTEGER NOT NULL, cpu_ns INTEGER NOT NULL,
        stack BLOB NOT NULL,
        PRIMARY KEY (puid, tid, t_ns)
    ) WITHOUT ROWID""",
    """CREATE TABLE sample_threads (
        puid INTEGER NOT NULL, tid INTEGER NOT NULL, longest_ns INTEGER NOT NULL,
        PRIMARY KEY (puid, tid)
    ) WITHOUT ROWID""",
    """CREATE TABLE samplers (
        puid INTEGER PRIMARY KEY, mode TEXT NOT NULL, interval_ms INTEGER NOT NULL,
        ticks INTEGER NOT NULL, late_ticks INTEGER NOT NULL, cost_ns INTEGER NOT NULL
    )""",
    "INSERT INTO counters VALUES ('samples', 0)",
)
#: Version 10: the interval the sampler paced itself to when it reported (for the samples of
#: that batch) and the longest it used; 0 for a report stored before, or sent by a tracer that
#: predates pacing (it ticked at ``interval_ms`` throughout).
SAMPLER_INTERVALS_SCHEMA: Final = (
    "ALTER TABLE samplers ADD COLUMN current_interval_ns INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE samplers ADD COLUMN longest_interval_ns INTEGER NOT NULL DEFAULT 0",
)
#: Version 11: ``seq_methods`` folded into ``batch_seqs``, whose key it shared: the methods a
#: sequence's Starts ran in the batch (a msgpack array), NULL on a row of a sequence the batch
#: has only Handoffs of.
BATCH_METHODS_SCHEMA: Final = (
    "ALTER TABLE batch_seqs ADD COLUMN methods BLOB",
    """UPDATE batch_seqs SET methods = (
        SELECT m.methods FROM seq_methods m
        WHERE m.seq = batch_seqs.seq AND m.puid = batch_seqs.puid
          AND m.batch_no = batch_seqs.batch_no)""",
    "DROP TABLE seq_methods",
)
#: Version 5 added lossy sequences: (seq, puid) when process puid reported (``Batch.lost_seqs``)
#: that it dropped events of seq. Keyed by sequence first, so listing asks by index.
LOST_SEQS_SCHEMA: Final = (
    """CREATE TABLE lost_seqs (
        seq BLOB NOT NULL, puid INTEGER NOT NULL,
        PRIMARY KEY (seq, puid)
    ) WITHOUT ROWID""",
)
#: Version 12: (puid, first_ns, last_ns) when process puid reported (``Batch.lost_windows``,
#: wall clock here) that it dropped events of sequences it could not name in that window: the
#: sequences of the process that overlap it are lossy (``LOST_WINDOWS_OF``). Rare: a process
#: has a few.
LOST_WINDOWS_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS lost_windows (
        puid INTEGER NOT NULL, first_ns INTEGER NOT NULL, last_ns INTEGER NOT NULL,
        PRIMARY KEY (puid, first_ns, last_ns)
    ) WITHOUT ROWID""",
)

#: Versions 1 to 5 stored a row per Start and per End (wall-clock times), joined on read.
LEGACY_EVENTS_SCHEMA: Final = (
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
)
#: Version 6: each batch's thread chunks as one blob (monotonic times, the batch's clock offset
#: beside it) and the index of ``cmr.store.packed``: the sequences in each batch, the methods each
#: sequence ran, and the Ends and Attrs whose Start is not in their batch (``late_*``).
PACKED_SCHEMA: Final = (
    "ALTER TABLE batches ADD COLUMN clock_offset_ns INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE batches ADD COLUMN chunks BLOB",
    """CREATE TABLE batch_seqs (
        seq BLOB NOT NULL, puid INTEGER NOT NULL, batch_no INTEGER NOT NULL,
        PRIMARY KEY (seq, puid, batch_no)
    ) WITHOUT ROWID""",
    "CREATE INDEX batch_seqs_by_batch ON batch_seqs (puid, batch_no)",
    """CREATE TABLE seq_methods (
        seq BLOB NOT NULL, puid INTEGER NOT NULL, batch_no INTEGER NOT NULL,
        methods BLOB NOT NULL,  -- msgpack array of the method ids its Starts in the batch ran
        PRIMARY KEY (seq, puid, batch_no)
    ) WITHOUT ROWID""",
    """CREATE TABLE late_ends (
        puid INTEGER NOT NULL, iid INTEGER NOT NULL, end_ns INTEGER NOT NULL, error TEXT,
        PRIMARY KEY (puid, iid)
    ) WITHOUT ROWID""",
    "CREATE INDEX late_ends_by_time ON late_ends (end_ns)",
    """CREATE TABLE late_attrs (
        puid INTEGER NOT NULL, iid INTEGER NOT NULL, batch_no INTEGER NOT NULL,
        attributes BLOB NOT NULL,  -- JSON object
        PRIMARY KEY (puid, iid, batch_no)
    ) WITHOUT ROWID""",
)
#: Version 7: what a listing line needs, kept at ingest (``cmr.store.summaries``): each sequence's
#: Start count and best root candidate, the threads it ran on, its entries that continue a
#: hand-off, and its invocations still open (an End was not in the Start's batch).
SUMMARY_SCHEMA: Final = (
    "ALTER TABLE sequences ADD COLUMN invocations INTEGER NOT NULL DEFAULT 0",
    """CREATE TABLE seq_roots (
        seq BLOB PRIMARY KEY, untrue INTEGER NOT NULL, handed INTEGER NOT NULL,
        start_ns INTEGER NOT NULL, puid INTEGER NOT NULL, iid INTEGER NOT NULL,
        method INTEGER NOT NULL, end_ns INTEGER
    ) WITHOUT ROWID""",
    """CREATE TABLE seq_threads (
        seq BLOB NOT NULL, puid INTEGER NOT NULL, tid INTEGER NOT NULL,
        PRIMARY KEY (seq, puid, tid)
    ) WITHOUT ROWID""",
    """CREATE TABLE seq_entries (
        seq BLOB NOT NULL, puid INTEGER NOT NULL, iid INTEGER NOT NULL, hid INTEGER NOT NULL,
        end_ns INTEGER,
        PRIMARY KEY (seq, puid, iid)
    ) WITHOUT ROWID""",
    """CREATE TABLE open_calls (
        puid INTEGER NOT NULL, iid INTEGER NOT NULL, seq BLOB NOT NULL,
        PRIMARY KEY (puid, iid)
    ) WITHOUT ROWID""",
    "CREATE INDEX open_calls_by_seq ON open_calls (seq, puid)",
)
#: Version 8: the exception type the root candidate raised (NULL: it did not, or has not ended).
ROOT_ERROR_SCHEMA: Final = ("ALTER TABLE seq_roots ADD COLUMN error TEXT",)
#: Version 9: each sequence's listing keys (``cmr.store.listing``): its root's name when the root
#: is a true root with a known method (NULL: the listing line decides), the root's end and the
#: exception it raised; indexed for the root pattern, the duration (end - start) and errors.
LISTING_KEYS_SCHEMA: Final = (
    "ALTER TABLE sequences ADD COLUMN root_name TEXT",
    "ALTER TABLE sequences ADD COLUMN end_ns INTEGER",
    "ALTER TABLE sequences ADD COLUMN error TEXT",
    "CREATE INDEX sequences_by_root ON sequences (root_name, start_ns, seq)",
    "CREATE INDEX sequences_by_duration ON sequences (end_ns - start_ns, start_ns, seq)",
    "CREATE INDEX sequences_failed ON sequences (start_ns, seq) WHERE error IS NOT NULL",
)

SCHEMA: Final = (
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
    *HANDOFFS_SCHEMA,
    *HEARTBEAT_SCHEMA,
    *SAMPLES_SCHEMA,
    *LOST_SEQS_SCHEMA,
    *PACKED_SCHEMA,
    *SUMMARY_SCHEMA,
    *ROOT_ERROR_SCHEMA,
    *LISTING_KEYS_SCHEMA,
    *SAMPLER_INTERVALS_SCHEMA,
    *BATCH_METHODS_SCHEMA,
    *LOST_WINDOWS_SCHEMA,
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)
_CURRENT: Final = f"PRAGMA user_version = {SCHEMA_VERSION}"
#: From each older version straight to SCHEMA_VERSION.
#: From each older version to the packed tables (``sqlite_migrate`` then moves the rows).
UPGRADES: Final = {
    1: (
        *HANDOFFS_SCHEMA,
        *HEARTBEAT_SCHEMA,
        *SAMPLES_SCHEMA,
        *LOST_SEQS_SCHEMA,
        *PACKED_SCHEMA,
        *SUMMARY_SCHEMA,
        *ROOT_ERROR_SCHEMA,
        *LISTING_KEYS_SCHEMA,
        *SAMPLER_INTERVALS_SCHEMA,
        *BATCH_METHODS_SCHEMA,
        *LOST_WINDOWS_SCHEMA,
    ),
    2: (
        *HEARTBEAT_SCHEMA,
        *SAMPLES_SCHEMA,
        *LOST_SEQS_SCHEMA,
        *PACKED_SCHEMA,
        *SUMMARY_SCHEMA,
        *ROOT_ERROR_SCHEMA,
        *LISTING_KEYS_SCHEMA,
        *SAMPLER_INTERVALS_SCHEMA,
        *BATCH_METHODS_SCHEMA,
        *LOST_WINDOWS_SCHEMA,
    ),
    3: (
        *SAMPLES_SCHEMA,
        *LOST_SEQS_SCHEMA,
        *PACKED_SCHEMA,
        *SUMMARY_SCHEMA,
        *ROOT_ERROR_SCHEMA,
        *LISTING_KEYS_SCHEMA,
        *SAMPLER_INTERVALS_SCHEMA,
        *BATCH_METHODS_SCHEMA,
        *LOST_WINDOWS_SCHEMA,
    ),
    4: (
        *LOST_SEQS_SCHEMA,
        *PACKED_SCHEMA,
        *SUMMARY_SCHEMA,
        *ROOT_ERROR_SCHEMA,
        *LISTING_KEYS_SCHEMA,
        *SAMPLER_INTERVALS_SCHEMA,
        *BATCH_METHODS_SCHEMA,
        *LOST_WINDOWS_SCHEMA,
    ),
    5: (
        *PACKED_SCHEMA,
        *SUMMARY_SCHEMA,
        *ROOT_ERROR_SCHEMA,
        *LISTING_KEYS_SCHEMA,
        *SAMPLER_INTERVALS_SCHEMA,
        *BATCH_METHODS_SCHEMA,
        *LOST_WINDOWS_SCHEMA,
    ),
    6: (
        *SUMMARY_SCHEMA,
        *ROOT_ERROR_SCHEMA,
        *LISTING_KEYS_SCHEMA,
        *SAMPLER_INTERVALS_SCHEMA,
        *BATCH_METHODS_SCHEMA,
        *LOST_WINDOWS_SCHEMA,
    ),
    7: (
        *ROOT_ERROR_SCHEMA,
        *LISTING_KEYS_SCHEMA,
        *SAMPLER_INTERVALS_SCHEMA,
        *BATCH_METHODS_SCHEMA,
        *LOST_WINDOWS_SCHEMA,
    ),
    8: (
        *LISTING_KEYS_SCHEMA,
        *SAMPLER_INTERVALS_SCHEMA,
        *BATCH_METHODS_SCHEMA,
        *LOST_WINDOWS_SCHEMA,
    ),
    9: (*SAMPLER_INTERVALS_SCHEMA, *BATCH_METHODS_SCHEMA, *LOST_WINDOWS_SCHEMA),
    10: (*BATCH_METHODS_SCHEMA, *LOST_WINDOWS_SCHEMA),
    11: LOST_WINDOWS_SCHEMA,
}
CURRENT_VERSION: Final = _CURRENT

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
#: statement is put in place of {picked}), in no order.
SUMMARIES_OF_PICKED: Final = """
    SELECT s.seq, s.start_ns, s.invocations,
           r.untrue, r.handed, r.start_ns, r.puid, r.iid, r.method,
           coalesce(r.end_ns, l.end_ns),
           CASE WHEN r.end_ns IS NULL THEN l.error ELSE r.error END,
           m.module, m.qualname, m.file, m.line
    FROM ({picked}) s
    JOIN seq_roots r ON r.seq = s.seq
    LEFT JOIN late_ends l ON l.puid = r.puid AND l.iid = r.iid
    LEFT JOIN methods m ON m.puid = r.puid AND m.method = r.method"""
#: The processes whose windows of unnamed drops sequence :seq overlaps (it ran on them, from
#: its earliest Start to its root's end, or on if open: ``_shared.overlaps_window``), with the
#: first and last times of the windows it overlaps.
LOST_WINDOWS_OF: Final = """
    SELECT w.puid, min(w.first_ns), max(w.last_ns)
    FROM sequences s
    JOIN (SELECT DISTINCT puid FROM seq_threads WHERE seq = :seq) t
    JOIN lost_windows w ON w.puid = t.puid
    WHERE s.seq = :seq AND w.first_ns <= coalesce(s.end_ns, w.first_ns) AND w.last_ns >= s.start_ns
    GROUP BY w.puid"""
#: Whether sequence :seq is lossy: named by a process, or in a window of unnamed drops.
LOSSY: Final = f"""
    SELECT EXISTS (SELECT 1 FROM lost_seqs WHERE seq = :seq)
        OR EXISTS (SELECT 1 FROM lost_windows LIMIT 1) AND EXISTS ({LOST_WINDOWS_OF})"""
#: How many threads and processes a sequence ran on.
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
#: The stored batches holding a sequence's Starts or Handoffs, in (puid, batch_no) order.
SEQUENCE_BATCHES: Final = """
    SELECT b.puid, b.batch_no, b.clock_offset_ns, b.chunks
    FROM batch_seqs s JOIN batches b ON b.puid = s.puid AND b.batch_no = s.batch_no
    WHERE s.seq = ? ORDER BY s.puid, s.batch_no"""

#: A sampler report is cumulative: the one with the most ticks is the latest, whatever order
#: batches arrive in.
UPSERT_SAMPLER: Final = """
    INSERT INTO samplers VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (puid) DO UPDATE SET
        mode = excluded.mode, interval_ms = excluded.interval_ms, ticks = excluded.ticks,
        late_ticks = excluded.late_ticks, cost_ns = excluded.cost_ns,
        current_interval_ns = excluded.current_interval_ns,
        longest_interval_ns = excluded.longest_interval_ns
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
#: reads it until it has found enough sequences running a wanted method.
METHODS_BY_RECENT_SEQUENCE: Final = """
    SELECT q.seq, m.puid, m.methods FROM sequences q JOIN batch_seqs m ON m.seq = q.seq
    WHERE q.start_ns >= :since AND m.methods IS NOT NULL
    ORDER BY q.start_ns DESC, q.seq DESC"""

"""The PostgreSQL repository's schema, as the ordered list of migrations that builds it.

Each migration is applied once, in order, inside one transaction, and recorded in
``schema_migrations``; ``postgres_migrate`` checks the list at every start. Never edit a
migration that has shipped: append a new one.

Since version 3, events are stored as their batches arrived (``cmr.store.packed``, as in
SQLite): one ``bytea`` of thread chunks per batch in ``batches`` and the small index beside it,
with each sequence's listing line kept at ingest (``cmr.store.summaries``). Version 1 stored a
row per Start and End; ``postgres_legacy`` moves such rows into batches when it upgrades.

Hand-offs and samples are partitioned by range on a ``day`` column: the day (UTC, days since
the epoch) of the row's own time, clamped into a window around the repository's clock
(``postgres_partitions``). A partition is created the first time a row needs it and dropped
whole by ``prune`` once every row in it is older than the cutoff. A key that includes ``day`` is
all PostgreSQL can enforce on a partitioned table, so "the first write of a key wins" holds
within a day; readers take the earliest day's row when a forged duplicate sits in two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


#: The table that records which migrations ran; created before the first one.
MIGRATIONS_TABLE: Final = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""

#: The tables partitioned by day, each with the column whose day routes a row.
PARTITIONED: Final = {
    "handoffs": "submitted_ns",
    "samples": "t_ns",
}

_CORE: Final = (
    """CREATE TABLE processes (
        puid bigint PRIMARY KEY,
        pid integer NOT NULL,
        host text NOT NULL,
        platform_id text NOT NULL,
        argv text[] NOT NULL,
        clock_offset_ns bigint NOT NULL,
        started_ns bigint NOT NULL,
        ended boolean NOT NULL,  -- a final batch arrived
        dropped bigint NOT NULL,  -- cumulative: the largest count reported
        last_seen_ns bigint NOT NULL,
        heartbeat_ms integer NOT NULL
    )""",
    """CREATE TABLE methods (
        puid bigint NOT NULL, method bigint NOT NULL,
        module text NOT NULL, qualname text NOT NULL, file text NOT NULL, line bigint NOT NULL,
        PRIMARY KEY (puid, method)
    )""",
    """CREATE TABLE threads (
        puid bigint NOT NULL, tid bigint NOT NULL, native_id bigint NOT NULL, name text NOT NULL,
        PRIMARY KEY (puid, tid)
    )""",
    """CREATE TABLE frames (
        puid bigint NOT NULL, frame bigint NOT NULL,
        file text NOT NULL, function text NOT NULL, line bigint NOT NULL,
        PRIMARY KEY (puid, frame)
    )""",
    "CREATE TABLE sequences (seq bytea PRIMARY KEY, start_ns bigint NOT NULL)",
    "CREATE INDEX sequences_by_start ON sequences (start_ns, seq)",
    """CREATE TABLE starts (
        puid bigint NOT NULL, iid bigint NOT NULL, seq bytea NOT NULL,
        parent bigint NOT NULL, hid bigint NOT NULL, tid bigint NOT NULL,
        method bigint NOT NULL, start_ns bigint NOT NULL, day integer NOT NULL,
        PRIMARY KEY (puid, iid, day)
    ) PARTITION BY RANGE (day)""",
    "CREATE INDEX starts_by_seq ON starts (seq)",
    """CREATE TABLE ends (
        puid bigint NOT NULL, iid bigint NOT NULL, end_ns bigint NOT NULL, error text,
        day integer NOT NULL,
        PRIMARY KEY (puid, iid, day)
    ) PARTITION BY RANGE (day)""",
    """CREATE TABLE handoffs (
        hid bigint NOT NULL, seq bytea NOT NULL, puid bigint NOT NULL, parent bigint NOT NULL,
        kind text NOT NULL, method bigint NOT NULL, submitted_ns bigint NOT NULL,
        day integer NOT NULL,
        PRIMARY KEY (hid, day)
    ) PARTITION BY RANGE (day)""",
    "CREATE INDEX handoffs_by_seq ON handoffs (seq)",
    "CREATE INDEX handoffs_by_puid ON handoffs (puid)",
    # ``stack`` is msgpack [[frame ids], [lines]], outermost first, as in SQLite.
    """CREATE TABLE samples (
        puid bigint NOT NULL, tid bigint NOT NULL, t_ns bigint NOT NULL,
        weight bigint NOT NULL, duration_ns bigint NOT NULL, cpu_ns bigint NOT NULL,
        stack bytea NOT NULL, day integer NOT NULL,
        PRIMARY KEY (puid, tid, t_ns, day)
    ) PARTITION BY RANGE (day)""",
    """CREATE TABLE sample_threads (
        puid bigint NOT NULL, tid bigint NOT NULL, longest_ns bigint NOT NULL,
        PRIMARY KEY (puid, tid)
    )""",
    """CREATE TABLE samplers (
        puid bigint PRIMARY KEY, mode text NOT NULL, interval_ms bigint NOT NULL,
        ticks bigint NOT NULL, late_ticks bigint NOT NULL, cost_ns bigint NOT NULL
    )""",
    """CREATE TABLE lost_seqs (
        seq bytea NOT NULL, puid bigint NOT NULL,
        PRIMARY KEY (seq, puid)
    )""",
    # Not partitioned: (puid, batch_no) must stay unique whenever a batch is resent.
    """CREATE TABLE batches (
        puid bigint NOT NULL, batch_no bigint NOT NULL,
        received_ns bigint NOT NULL, events bigint NOT NULL,
        PRIMARY KEY (puid, batch_no)
    )""",
    "CREATE INDEX batches_by_received ON batches (received_ns)",
    "CREATE TABLE rejected (reason text PRIMARY KEY, frames bigint NOT NULL)",
    # One row per store instance (a ``cmr serve`` node, an import): nodes never wait on one
    # another's counters; ``stats`` adds the rows up.
    """CREATE TABLE counters (
        node bigint PRIMARY KEY,
        batches bigint NOT NULL, duplicate_batches bigint NOT NULL,
        events bigint NOT NULL, samples bigint NOT NULL
    )""",
)

#: Invocation attributes (protocol 5): one row per invocation and batch, msgpack-encoded (exact
#: for every value type the wire allows), merged in batch order when read.
_ATTRIBUTES: Final = (
    """CREATE TABLE attributes (
        puid bigint NOT NULL, iid bigint NOT NULL, batch_no bigint NOT NULL,
        attributes bytea NOT NULL,
        PRIMARY KEY (puid, iid, batch_no)
    )""",
)

#: Batches stored as they arrived (``cmr.store.packed``, as in SQLite) and each sequence's
#: listing line kept at ingest (``cmr.store.summaries``). ``postgres_legacy`` moves the rows of
#: ``starts``, ``ends`` and ``attributes`` into that form, then those tables are dropped.
_PACKED: Final = (
    """ALTER TABLE batches
        ADD COLUMN clock_offset_ns bigint NOT NULL DEFAULT 0,
        ADD COLUMN chunks bytea""",
    # A batch's chunks (about 90 KB for 4,096 events) are compressed by lz4, not pglz: it
    # stores a batch in a third of the time, nearly as small. A server built without lz4
    # (or older than PostgreSQL 14) keeps pglz: the same data, only slower.
    """DO $$ BEGIN
        ALTER TABLE batches ALTER COLUMN chunks SET COMPRESSION lz4;
    EXCEPTION WHEN OTHERS THEN NULL;
    END $$""",
    """CREATE TABLE batch_seqs (
        seq bytea NOT NULL, puid bigint NOT NULL, batch_no bigint NOT NULL,
        PRIMARY KEY (seq, puid, batch_no)
    )""",
    "CREATE INDEX batch_seqs_by_batch ON batch_seqs (puid, batch_no)",
    """CREATE TABLE seq_methods (
        seq bytea NOT NULL, puid bigint NOT NULL, batch_no bigint NOT NULL,
        methods bytea NOT NULL,  -- msgpack array of the method ids its Starts in the batch ran
        PRIMARY KEY (seq, puid, batch_no)
    )""",
    """CREATE TABLE late_ends (
        puid bigint NOT NULL, iid bigint NOT NULL, end_ns bigint NOT NULL, error text,
        PRIMARY KEY (puid, iid)
    )""",
    "CREATE INDEX late_ends_by_time ON late_ends (end_ns)",
    """CREATE TABLE late_attrs (
        puid bigint NOT NULL, iid bigint NOT NULL, batch_no bigint NOT NULL,
        attributes bytea NOT NULL,  -- JSON object
        PRIMARY KEY (puid, iid, batch_no)
    )""",
    "ALTER TABLE sequences ADD COLUMN invocations bigint NOT NULL DEFAULT 0",
    """CREATE TABLE seq_roots (
        seq bytea PRIMARY KEY, untrue integer NOT NULL, handed integer NOT NULL,
        start_ns bigint NOT NULL, puid bigint NOT NULL, iid bigint NOT NULL,
        method bigint NOT NULL, end_ns bigint
    )""",
    """CREATE TABLE seq_threads (
        seq bytea NOT NULL, puid bigint NOT NULL, tid bigint NOT NULL,
        PRIMARY KEY (seq, puid, tid)
    )""",
    """CREATE TABLE seq_entries (
        seq bytea NOT NULL, puid bigint NOT NULL, iid bigint NOT NULL, hid bigint NOT NULL,
        end_ns bigint,
        PRIMARY KEY (seq, puid, iid)
    )""",
    """CREATE TABLE open_calls (
        puid bigint NOT NULL, iid bigint NOT NULL, seq bytea NOT NULL,
        PRIMARY KEY (puid, iid)
    )""",
    "CREATE INDEX open_calls_by_seq ON open_calls (seq, puid)",
)

#: The exception type the root candidate raised (NULL: it did not, or has not ended); the roots
#: are computed again after it (``postgres_migrate``).
_ROOT_ERROR: Final = ("ALTER TABLE seq_roots ADD COLUMN error text",)

#: A sequence's listing keys (``_LISTING_KEYS``) from its root candidate ``r``, its late End
#: ``l`` and its method ``m``: root_name, end_ns, error.
_KEYS: Final = """
    CASE WHEN r.untrue = 0 AND r.handed = 0 AND m.qualname IS NOT NULL THEN
        CASE WHEN m.module <> '' THEN m.module || '.' || m.qualname ELSE m.qualname END
    END,
    coalesce(r.end_ns, l.end_ns),
    CASE WHEN r.end_ns IS NULL THEN l.error ELSE r.error END"""
_KEYS_JOINS: Final = """
    LEFT JOIN late_ends l ON l.puid = r.puid AND l.iid = r.iid
    LEFT JOIN methods m ON m.puid = r.puid AND m.method = r.method"""
#: Each sequence's listing keys: its root's name when the root is a true root with a known
#: method (NULL: the listing line decides), its end and the exception it raised; indexed for the
#: root pattern, the duration and errors. Computed for the sequences stored before.
_LISTING_KEYS: Final = (
    "ALTER TABLE sequences ADD COLUMN root_name text, ADD COLUMN end_ns bigint, "
    "ADD COLUMN error text",
    "CREATE INDEX sequences_by_root ON sequences (root_name, start_ns, seq)",
    "CREATE INDEX sequences_by_duration ON sequences ((end_ns - start_ns), start_ns, seq)",
    "CREATE INDEX sequences_failed ON sequences (start_ns, seq) WHERE error IS NOT NULL",
    f"""UPDATE sequences s SET (root_name, end_ns, error) = (
        SELECT {_KEYS} FROM seq_roots r {_KEYS_JOINS} WHERE r.seq = s.seq)""",
)
#: The interval a process's sampler paced itself to as of its report, and the longest it used
#: (0: a report stored before, or a tracer that predates pacing).
_SAMPLER_INTERVALS: Final = (
    "ALTER TABLE samplers ADD COLUMN current_interval_ns bigint NOT NULL DEFAULT 0, "
    "ADD COLUMN longest_interval_ns bigint NOT NULL DEFAULT 0",
)
#: The methods a sequence's Starts ran in a batch, on its ``batch_seqs`` row (same key) instead
#: of a table of their own: one index row less per sequence and batch (issue 33). NULL on the
#: row of a sequence the batch has only Handoffs of.
_BATCH_METHODS: Final = (
    "ALTER TABLE batch_seqs ADD COLUMN methods bytea",
    """UPDATE batch_seqs s SET methods = m.methods FROM seq_methods m
       WHERE m.seq = s.seq AND m.puid = s.puid AND m.batch_no = s.batch_no""",
    "DROP TABLE seq_methods",
)
#: The time windows of drops whose sequences a process could not name (``Batch.lost_windows``,
#: wall clock): the sequences of the process that overlap one are lossy (``LOST_WINDOWS_OF``).
_LOST_WINDOWS: Final = (
    """CREATE TABLE IF NOT EXISTS lost_windows (
        puid bigint NOT NULL, first_ns bigint NOT NULL, last_ns bigint NOT NULL,
        PRIMARY KEY (puid, first_ns, last_ns)
    )""",
)
#: The versions whose migration also runs Python after its statements (``postgres_migrate``):
#: moving the rows into batches, then computing the listing lines.
PACKED_VERSION: Final = 3
ROOT_ERROR_VERSION: Final = 4

MIGRATIONS: Final = (
    Migration(1, "processes, events partitioned by day, samples, counters", _CORE),
    Migration(2, "invocation attributes", _ATTRIBUTES),
    Migration(PACKED_VERSION, "batches stored as they arrived, listing lines", _PACKED),
    Migration(ROOT_ERROR_VERSION, "the exception the root raised, in listing lines", _ROOT_ERROR),
    Migration(5, "listing keys on each sequence, indexed", _LISTING_KEYS),
    Migration(6, "the sampler's paced interval in its report", _SAMPLER_INTERVALS),
    Migration(7, "the methods each sequence ran, on its batch_seqs row", _BATCH_METHODS),
    Migration(8, "the time windows of drops whose sequences were not named", _LOST_WINDOWS),
)
SCHEMA_VERSION: Final = MIGRATIONS[-1].version

# -- statements ---------------------------------------------------------------------------

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
    INSERT INTO samplers AS s VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
    ON CONFLICT (puid) DO UPDATE SET
        mode = excluded.mode, interval_ms = excluded.interval_ms, ticks = excluded.ticks,
        late_ticks = excluded.late_ticks, cost_ns = excluded.cost_ns,
        current_interval_ns = excluded.current_interval_ns,
        longest_interval_ns = excluded.longest_interval_ns
    WHERE excluded.ticks >= s.ticks"""
UPSERT_SAMPLE_THREADS: Final = """
    INSERT INTO sample_threads AS t
    SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[]) ORDER BY 1, 2
    ON CONFLICT (puid, tid) DO UPDATE
    SET longest_ns = greatest(t.longest_ns, excluded.longest_ns)"""

#: Rows are sorted by seq, so concurrent nodes lock shared sequence rows in one order. A
#: sequence counts the Starts of every batch that brought some (``cmr.store.summaries``). A new
#: sequence's listing keys come from its group's root candidate, bound with it (its method's
#: name looked up, and its late End only when it has not ended); a sequence stored before takes
#: them from its stored candidate (the join), as does one whose open root a late End of the
#: group ends (the second part of ``batch``, always stored before). Joining every row to
#: ``seq_roots`` and ``late_ends`` cost a request-sized sequence more than storing it (issue 33).
UPSERT_SEQUENCES: Final = f"""
    WITH batch AS (
        SELECT seq, min(start_ns) AS start_ns, sum(invocations)::bigint AS invocations,
               min(root_name) AS root_name, min(end_ns) AS end_ns, min(error) AS error
        FROM (
            SELECT b.seq, b.start_ns, b.invocations,
                CASE WHEN b.decided <> 0 THEN (
                    SELECT CASE WHEN m.module <> '' THEN m.module || '.' || m.qualname
                                ELSE m.qualname END
                    FROM methods m WHERE m.puid = b.puid AND m.method = b.method) END,
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
    )
    INSERT INTO sequences AS q (seq, start_ns, invocations, root_name, end_ns, error)
    SELECT seq, start_ns, invocations, root_name, end_ns, error FROM batch
    ORDER BY 1
    ON CONFLICT (seq) DO UPDATE SET
        start_ns = least(q.start_ns, excluded.start_ns),
        invocations = q.invocations + excluded.invocations,
        (root_name, end_ns, error) = (
            SELECT {_KEYS} FROM seq_roots r {_KEYS_JOINS} WHERE r.seq = excluded.seq)"""
#: The lowest ``root_rank`` wins; an equal one (the same Start again) changes nothing.
UPSERT_ROOTS: Final = """
    INSERT INTO seq_roots AS r
    SELECT * FROM unnest(%b::bytea[], %b::integer[], %b::integer[], %b::bigint[],
                         %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[], %b::text[])
    ORDER BY 1
    ON CONFLICT (seq) DO UPDATE SET
        untrue = excluded.untrue, handed = excluded.handed, start_ns = excluded.start_ns,
        puid = excluded.puid, iid = excluded.iid, method = excluded.method,
        end_ns = excluded.end_ns, error = excluded.error
    WHERE (excluded.untrue, excluded.handed, excluded.start_ns, excluded.puid, excluded.iid)
        < (r.untrue, r.handed, r.start_ns, r.puid, r.iid)"""
#: An invocation is opened unless its End came first (a late End already stored).
OPEN_CALLS: Final = """
    INSERT INTO open_calls
    SELECT o.puid, o.iid, o.seq
    FROM unnest(%b::bigint[], %b::bigint[], %b::bytea[]) AS o (puid, iid, seq)
    WHERE NOT EXISTS (SELECT 1 FROM late_ends l WHERE l.puid = o.puid AND l.iid = o.iid)
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING"""
#: The listing lines' stored parts of the sequences a page picks (``listing_sql.picked``: the
#: statement is put in place of {picked}), in no order.
SUMMARIES_OF_PICKED: Final = """
    SELECT s.seq, s.start_ns, s.invocations,
           r.untrue, r.handed, r.start_ns, r.puid, r.iid, r.method,
           coalesce(r.end_ns, l.end_ns),
           CASE WHEN r.end_ns IS NULL THEN l.error ELSE r.error END,
           m.module, m.qualname, m.file, m.line,
           (SELECT count(*) FROM seq_threads t WHERE t.seq = s.seq),
           (SELECT count(DISTINCT t.puid) FROM seq_threads t WHERE t.seq = s.seq),
           EXISTS (SELECT 1 FROM lost_seqs x WHERE x.seq = s.seq)
           OR EXISTS (SELECT 1 FROM lost_windows LIMIT 1) AND EXISTS (
               SELECT 1 FROM sequences q JOIN seq_threads t ON t.seq = q.seq
               JOIN lost_windows w ON w.puid = t.puid
               WHERE q.seq = s.seq AND w.first_ns <= coalesce(q.end_ns, w.first_ns)
                 AND w.last_ns >= q.start_ns)
    FROM ({picked}) s
    JOIN seq_roots r ON r.seq = s.seq
    LEFT JOIN late_ends l ON l.puid = r.puid AND l.iid = r.iid
    LEFT JOIN methods m ON m.puid = r.puid AND m.method = r.method"""
#: The processes whose windows of unnamed drops sequence %(seq)s overlaps (as in SQLite:
#: ``sqlite_schema.LOST_WINDOWS_OF``), with the first and last times of those windows.
LOST_WINDOWS_OF: Final = """
    SELECT w.puid, min(w.first_ns), max(w.last_ns)
    FROM sequences s
    JOIN (SELECT DISTINCT puid FROM seq_threads WHERE seq = %(seq)s) t ON true
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
#: The stored batches holding a sequence's Starts or Handoffs, in (puid, batch_no) order.
SEQUENCE_BATCHES: Final = """
    SELECT b.puid, b.batch_no, b.clock_offset_ns, b.chunks
    FROM batch_seqs s JOIN batches b ON b.puid = s.puid AND b.batch_no = s.batch_no
    WHERE s.seq = %(seq)s ORDER BY s.puid, s.batch_no"""
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
#: ``find_sequences`` reads it until it has found enough sequences running a wanted method.
METHODS_BY_RECENT_SEQUENCE: Final = """
    SELECT q.seq, m.puid, m.methods FROM sequences q JOIN batch_seqs m ON m.seq = q.seq
    WHERE q.start_ns >= %(since)s AND m.methods IS NOT NULL
    ORDER BY q.start_ns DESC, q.seq DESC"""

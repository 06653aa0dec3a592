"""The PostgreSQL repository's schema: each version's statements, which the ordered list of
migrations (``postgres_migrate.MIGRATIONS``) applies.

Each migration is applied once, in order, inside one transaction, and recorded in
``schema_migrations``; ``postgres_migrate`` checks the list at every start. Never edit a
migration that has shipped: append a new one.

Since version 3, events are stored as their batches arrived (``cmr.store.stored_batches``, as in
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

from typing import Final

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

CORE: Final = (
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
ATTRIBUTES: Final = (
    """CREATE TABLE attributes (
        puid bigint NOT NULL, iid bigint NOT NULL, batch_no bigint NOT NULL,
        attributes bytea NOT NULL,
        PRIMARY KEY (puid, iid, batch_no)
    )""",
)

#: Batches stored as they arrived (``cmr.store.stored_batches``, as in SQLite) and each sequence's
#: listing line kept at ingest (``cmr.store.summaries``). ``postgres_legacy`` moves the rows of
#: ``starts``, ``ends`` and ``attributes`` into that form, then those tables are dropped.
PACKED: Final = (
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
ROOT_ERROR: Final = ("ALTER TABLE seq_roots ADD COLUMN error text",)

#: A sequence's listing keys (``LISTING_KEYS``) from its root candidate ``r``, its late End
#: ``l`` and its method ``m``: root_name, end_ns, error.
LISTING_KEYS_COLUMNS: Final = """
    CASE WHEN r.untrue = 0 AND r.handed = 0 AND m.qualname IS NOT NULL THEN
        CASE WHEN m.module <> '' THEN m.module || '.' || m.qualname ELSE m.qualname END
    END,
    coalesce(r.end_ns, l.end_ns),
    CASE WHEN r.end_ns IS NULL THEN l.error ELSE r.error END"""
LISTING_KEYS_JOINS: Final = """
    LEFT JOIN late_ends l ON l.puid = r.puid AND l.iid = r.iid
    LEFT JOIN methods m ON m.puid = r.puid AND m.method = r.method"""
#: Each sequence's listing keys: its root's name when the root is a true root with a known
#: method (NULL: the listing line decides), its end and the exception it raised; indexed for the
#: root pattern, the duration and errors. Computed for the sequences stored before.
LISTING_KEYS: Final = (
    "ALTER TABLE sequences ADD COLUMN root_name text, ADD COLUMN end_ns bigint, "
    "ADD COLUMN error text",
    "CREATE INDEX sequences_by_root ON sequences (root_name, start_ns, seq)",
    "CREATE INDEX sequences_by_duration ON sequences ((end_ns - start_ns), start_ns, seq)",
    "CREATE INDEX sequences_failed ON sequences (start_ns, seq) WHERE error IS NOT NULL",
    f"""UPDATE sequences s SET (root_name, end_ns, error) = (
        SELECT {LISTING_KEYS_COLUMNS} FROM seq_roots r {LISTING_KEYS_JOINS} WHERE r.seq = s.seq)""",
)
#: The interval a process's sampler paced itself to as of its report, and the longest it used
#: (0: a report stored before, or a tracer that predates pacing).
SAMPLER_INTERVALS: Final = (
    "ALTER TABLE samplers ADD COLUMN current_interval_ns bigint NOT NULL DEFAULT 0, "
    "ADD COLUMN longest_interval_ns bigint NOT NULL DEFAULT 0",
)
#: The samples a process's sampler dropped (its queue to the sender full), in its report (0: a
#: report stored before, or a tracer that predates it).
SAMPLER_DROPS: Final = (
    "ALTER TABLE samplers ADD COLUMN dropped_samples bigint NOT NULL DEFAULT 0",
)
#: The methods a sequence's Starts ran in a batch, on its ``batch_seqs`` row (same key) instead
#: of a table of their own: one index row less per sequence and batch (issue 33). NULL on the
#: row of a sequence the batch has only Handoffs of.
BATCH_METHODS: Final = (
    "ALTER TABLE batch_seqs ADD COLUMN methods bytea",
    """UPDATE batch_seqs s SET methods = m.methods FROM seq_methods m
       WHERE m.seq = s.seq AND m.puid = s.puid AND m.batch_no = s.batch_no""",
    "DROP TABLE seq_methods",
)
#: The time windows of drops whose sequences a process could not name (``Batch.lost_windows``,
#: wall clock): the sequences of the process that overlap one are lossy (``LOST_WINDOWS_OF``).
LOST_WINDOWS: Final = (
    """CREATE TABLE IF NOT EXISTS lost_windows (
        puid bigint NOT NULL, first_ns bigint NOT NULL, last_ns bigint NOT NULL,
        PRIMARY KEY (puid, first_ns, last_ns)
    )""",
)


#: A *single row* sequence (``cmr.store.single_rows``, as SQLite's schema 13): a request-shaped
#: sequence new to the repository keeps its root (one_puid, one_iid, one_method; started at
#: ``start_ns``, ended at ``end_ns`` with ``error``), its thread (one_puid, one_tid) and its
#: batch (one_puid, one_batch, with the methods it ran there) on its ``sequences`` row, and
#: ``seq_roots``, ``seq_threads`` and ``batch_seqs`` get no row for it (issue 33, goal 6).
#: ``one_batch`` is NULL on every other row; the partial index is what ``prune`` reads.
SINGLE_ROWS: Final = (
    "ALTER TABLE sequences ADD COLUMN one_puid bigint, ADD COLUMN one_tid bigint, "
    "ADD COLUMN one_iid bigint, ADD COLUMN one_method bigint, ADD COLUMN one_batch bigint, "
    "ADD COLUMN one_methods bytea",
    "CREATE INDEX sequences_by_batch ON sequences (one_puid, one_batch) "
    "WHERE one_batch IS NOT NULL",
)

#: Single rows kept out of the start, root and duration indexes and listed by their blocks
#: (``cmr.store.block_pages``, as SQLite's schema 16): here a block is the single rows of one
#: batch, found by the index by batch each of them has (``sequences_by_batch``), described by a
#: ``single_blocks`` row (the range of their starts, their longest duration) and a
#: ``single_block_roots`` row per root name among them (its latest start and longest duration
#: there), both written right after the rows (``single.write_blocks``). The three indexes are
#: made again without single rows; the rows whose root is undecided, which the root index served
#: by its NULL names, get an index of their own (few rows); the index by batch ends with the
#: start, so that a block's newest rows are read in its order. The single rows stored before get
#: their batches' blocks.
SINGLE_BLOCKS: Final = (
    "DROP INDEX sequences_by_start",
    "CREATE INDEX sequences_by_start ON sequences (start_ns, seq) WHERE one_batch IS NULL",
    "DROP INDEX sequences_by_root",
    "CREATE INDEX sequences_by_root ON sequences (root_name, start_ns, seq)"
    " WHERE one_batch IS NULL",
    "DROP INDEX sequences_by_duration",
    "CREATE INDEX sequences_by_duration ON sequences ((end_ns - start_ns), start_ns, seq)"
    " WHERE one_batch IS NULL",
    "CREATE INDEX sequences_undecided ON sequences (start_ns, seq) WHERE root_name IS NULL",
    "DROP INDEX sequences_by_batch",
    "CREATE INDEX sequences_by_batch ON sequences (one_puid, one_batch, start_ns, seq) "
    "WHERE one_batch IS NOT NULL",
    """CREATE TABLE single_blocks (
        puid bigint NOT NULL, batch_no bigint NOT NULL,
        first_ns bigint NOT NULL, last_ns bigint NOT NULL, longest_ns bigint NOT NULL,
        PRIMARY KEY (puid, batch_no)
    )""",
    "CREATE INDEX single_blocks_by_last ON single_blocks (last_ns)",
    "CREATE INDEX single_blocks_by_longest ON single_blocks (longest_ns, last_ns)",
    """CREATE TABLE single_block_roots (
        puid bigint NOT NULL, batch_no bigint NOT NULL, root_name text NOT NULL,
        last_ns bigint NOT NULL, longest_ns bigint NOT NULL,
        PRIMARY KEY (puid, batch_no, root_name)
    )""",
    "CREATE INDEX single_block_roots_by_last ON single_block_roots (root_name, last_ns)",
    "CREATE INDEX single_block_roots_by_longest ON single_block_roots (root_name, longest_ns)",
    """INSERT INTO single_blocks
    SELECT one_puid, one_batch, min(start_ns), max(start_ns), max(coalesce(end_ns - start_ns, 0))
    FROM sequences WHERE one_batch IS NOT NULL GROUP BY one_puid, one_batch""",
    """INSERT INTO single_block_roots
    SELECT one_puid, one_batch, root_name, max(start_ns), max(coalesce(end_ns - start_ns, 0))
    FROM sequences WHERE one_batch IS NOT NULL AND root_name IS NOT NULL
    GROUP BY one_puid, one_batch, root_name""",
)

# -- statements ---------------------------------------------------------------------------

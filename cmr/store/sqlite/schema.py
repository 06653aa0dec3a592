"""The SQLite repository's schema and its upgrades (the statements that run on it are in
``statements``).

Version 2 added hand-offs, version 3 each process's heartbeat interval, version 4 stack samples,
their frames and each process's sampler report, version 5 the sequences a process dropped events of:
each purely additive. Version 6 stores events as their batches arrived
(``cmr.store.stored_batches``) instead of a row per Start and End; ``sqlite_migrate`` moves an
older file's rows into that form when it is opened for writing (``STEPS``, run by
``cmr.store.migrations``). Version 7 keeps each sequence's listing line at ingest
(``cmr.store.summaries``); an older file's are computed when it is upgraded. Version 8 adds the
exception the root raised to the listing line (its roots are computed
again on upgrade). Version 9 keeps each sequence's listing keys (its root's name, end and exception)
on its row, indexed, so that ``cmr ls --root/--min-duration/--status/--sort duration`` are served by
index (``cmr.store.listing``). Version 10 adds the sampler's paced interval to each process's
sampler report (additive: 0 for the reports stored before). Version 11 keeps the methods a sequence
ran in a batch on its ``batch_seqs`` row (same key) instead of a table of its own: one B-tree row
less per sequence and batch (issue 33). Version 12 adds the time windows of drops whose sequences a
process could not name (``lost_windows``, additive). Version 13 lets a request-shaped sequence
(complete in one batch, on one thread, rooted there, new) be stored as its ``sequences`` row
alone, its root, thread and batch on it (``SINGLE_ROWS_SCHEMA``; additive: rows stored before
keep their side tables). Version 14 adds the samples a sampler dropped to its report. Version 15
makes ``sequences`` a table new rows are appended to (``APPENDED_SEQUENCES_SCHEMA``). Version 16
lists single rows by their blocks, not by the root and duration indexes
(``SINGLE_BLOCKS_SCHEMA``).
"""

from __future__ import annotations

from cmr.store.migrations import Step, latest

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    import sqlite3
    from typing import Final

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
#: Version 14: the samples a process's sampler dropped (its queue to the sender full), in its
#: report; 0 for a report stored before, or sent by a tracer that predates it.
SAMPLER_DROPS_SCHEMA: Final = (
    "ALTER TABLE samplers ADD COLUMN dropped_samples INTEGER NOT NULL DEFAULT 0",
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
#: Version 13: a *single row* sequence (``cmr.store.sqlite.single``): one whose every Start is
#: in one batch, on one thread, rooted by a true root that started first and ended in that batch,
#: with no hand-off and nothing left open, stored when first seen. Its row carries what
#: ``seq_roots``, ``seq_threads`` and ``batch_seqs`` would (its root is (one_puid, one_iid,
#: one_method), started at ``start_ns``, ended at ``end_ns`` with ``error``; its thread
#: (one_puid, one_tid); its batch (one_puid, one_batch) and the methods it ran there), so none of
#: their rows is written: five B-tree rows a sequence instead of eight (issue 33). ``one_batch``
#: is NULL on every other row. A later batch that brings more of such a sequence first moves it
#: to the side tables (``single.spread``).
SINGLE_ROWS_SCHEMA: Final = (
    "ALTER TABLE sequences ADD COLUMN one_puid INTEGER",
    "ALTER TABLE sequences ADD COLUMN one_tid INTEGER",
    "ALTER TABLE sequences ADD COLUMN one_iid INTEGER",
    "ALTER TABLE sequences ADD COLUMN one_method INTEGER",
    "ALTER TABLE sequences ADD COLUMN one_batch INTEGER",
    "ALTER TABLE sequences ADD COLUMN one_methods BLOB",
    "CREATE INDEX sequences_by_batch ON sequences (one_puid, one_batch)"
    " WHERE one_batch IS NOT NULL",
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
#: beside it) and the index of ``cmr.store.stored_batches``: the sequences in each batch, the
#: methods each sequence ran, and the Ends and Attrs whose Start is not in their batch (``late_*``).
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

#: Version 1's tables (its row tables for events, ``LEGACY_EVENTS_SCHEMA``, aside).
BASE_SCHEMA: Final = (
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
)


#: Version 15: ``sequences`` appended to (issue 33). Keyed by the random sequence id, each new
#: row went to a random page of the table, and every page a transaction touches is written to
#: the WAL at commit and again by the checkpoint: once the table outgrew a group's rows each new
#: sequence wrote a page or two, and by a million of them ingest ran at a fourth of its rate
#: into an empty file. Now the table is a rowid table, new rows at its end, found by id through
#: a narrow unique index (the one B-tree still written at random); the duration index is by the
#: duration's band, then start, so it is appended to as well, its last column, the end,
#: answering a duration range without the table. The band's text is
#: ``listing_sql.DURATION_BAND``'s, which the queries must match to use the index (the plans of
#: tests/cmr/store/records.INDEXED_QUERIES say they do); written out here, as a shipped step
#: never changes. The other indexes are made again as their versions made them.
_SEQUENCE_COLUMNS: Final = (
    "seq, start_ns, invocations, root_name, end_ns, error, "
    "one_puid, one_tid, one_iid, one_method, one_batch, one_methods"
)
APPENDED_SEQUENCES_SCHEMA: Final = (
    """CREATE TABLE sequences_appended (
        seq BLOB NOT NULL, start_ns INTEGER NOT NULL, invocations INTEGER NOT NULL DEFAULT 0,
        root_name TEXT, end_ns INTEGER, error TEXT, one_puid INTEGER, one_tid INTEGER,
        one_iid INTEGER, one_method INTEGER, one_batch INTEGER, one_methods BLOB
    )""",
    f"""INSERT INTO sequences_appended ({_SEQUENCE_COLUMNS})
        SELECT {_SEQUENCE_COLUMNS} FROM sequences ORDER BY start_ns, seq""",
    "DROP TABLE sequences",
    "ALTER TABLE sequences_appended RENAME TO sequences",
    "CREATE UNIQUE INDEX sequences_by_seq ON sequences (seq)",
    "CREATE INDEX sequences_by_duration ON sequences "
    "((length(max(end_ns - start_ns, 0)) * 100 "
    "+ CAST(substr(max(end_ns - start_ns, 0), 1, 2) AS INTEGER)), start_ns, seq, end_ns)",
    *(
        statement
        for statement in (*BASE_SCHEMA, *LISTING_KEYS_SCHEMA, *SINGLE_ROWS_SCHEMA)
        if statement.startswith("CREATE INDEX sequences_")
        and "sequences_by_duration" not in statement
    ),
)


#: Version 16: single rows kept out of the start, root and duration indexes, listed by their blocks
#: (``cmr.store.sqlite.blocks``): each group's single rows are a rowid range of ``sequences``,
#: described by a ``single_blocks`` row (the range of their starts, their longest duration) and
#: a ``single_block_roots`` row per root name among them (its latest start and longest
#: duration there). The two indexes are made again without single rows; the rows whose root is
#: undecided, which the root index served by its NULL names, get an index of their own (few
#: rows: a sequence is decided once its root is known). The start index holds no single row
#: either: a listing newest first, ``find_sequences`` and ``prune`` read the single rows by
#: their blocks too. The index by batch (``prune``: whether a single row still names a batch or
#: a process) gives way to ``single_block_batches``: the batches whose single rows each block
#: holds. A file's single rows stored before get blocks of
#: ``BACKFILLED_BLOCK_ROWS`` rowids.
SINGLE_BLOCKS_SCHEMA: Final = (
    "DROP INDEX sequences_by_root",
    "CREATE INDEX sequences_by_root ON sequences (root_name, start_ns, seq)"
    " WHERE one_batch IS NULL",
    "DROP INDEX sequences_by_duration",
    "CREATE INDEX sequences_by_duration ON sequences "
    "((length(max(end_ns - start_ns, 0)) * 100 "
    "+ CAST(substr(max(end_ns - start_ns, 0), 1, 2) AS INTEGER)), start_ns, seq, end_ns)"
    " WHERE one_batch IS NULL",
    """CREATE TABLE single_blocks (
        first_row INTEGER PRIMARY KEY, last_row INTEGER NOT NULL,
        first_ns INTEGER NOT NULL, last_ns INTEGER NOT NULL, longest_ns INTEGER NOT NULL
    )""",
    "CREATE INDEX single_blocks_by_last ON single_blocks (last_ns)",
    "CREATE INDEX single_blocks_by_longest ON single_blocks (longest_ns, last_ns)",
    """CREATE TABLE single_block_roots (
        root_name TEXT NOT NULL, last_ns INTEGER NOT NULL, first_row INTEGER NOT NULL,
        longest_ns INTEGER NOT NULL,
        PRIMARY KEY (root_name, last_ns, first_row)
    ) WITHOUT ROWID""",
    "CREATE INDEX single_block_roots_by_longest ON single_block_roots (root_name, longest_ns)",
    "CREATE INDEX sequences_undecided ON sequences (start_ns, seq) WHERE root_name IS NULL",
    "DROP INDEX sequences_by_batch",
    "DROP INDEX sequences_by_start",
    "CREATE INDEX sequences_by_start ON sequences (start_ns, seq) WHERE one_batch IS NULL",
    """CREATE TABLE single_block_batches (
        puid INTEGER NOT NULL, batch_no INTEGER NOT NULL,
        first_row INTEGER NOT NULL, last_row INTEGER NOT NULL,
        PRIMARY KEY (puid, batch_no, first_row)
    ) WITHOUT ROWID""",
)
#: The rowids a block made for the single rows of an older file spans.
BACKFILLED_BLOCK_ROWS: Final = 2048


def _backfill_blocks(conn: sqlite3.Connection) -> None:
    conn.execute(
        f"""INSERT INTO single_blocks
        SELECT min(rowid), max(rowid), min(start_ns), max(start_ns),
               max(coalesce(end_ns - start_ns, 0))
        FROM sequences WHERE one_batch IS NOT NULL GROUP BY rowid / {BACKFILLED_BLOCK_ROWS}"""
    )
    conn.execute(
        """INSERT INTO single_block_roots
        SELECT q.root_name, max(q.start_ns), b.first_row, max(coalesce(q.end_ns - q.start_ns, 0))
        FROM single_blocks b JOIN sequences q ON q.rowid BETWEEN b.first_row AND b.last_row
        WHERE q.one_batch IS NOT NULL AND q.root_name IS NOT NULL
        GROUP BY b.first_row, q.root_name"""
    )
    conn.execute(
        """INSERT INTO single_block_batches
        SELECT DISTINCT q.one_puid, q.one_batch, b.first_row, b.last_row
        FROM single_blocks b JOIN sequences q ON q.rowid BETWEEN b.first_row AND b.last_row
        WHERE q.one_batch IS NOT NULL"""
    )


def _move_legacy_rows(conn: sqlite3.Connection) -> None:
    from cmr.store.sqlite.migrate import move_legacy_rows  # loaded for an upgrade only

    move_legacy_rows(conn)


def _compute_listing_lines(conn: sqlite3.Connection) -> None:
    from cmr.store.sqlite import summaries  # loaded for an upgrade only

    conn.execute("DELETE FROM seq_roots")  # version 7's lack the root's exception
    summaries.backfill(conn)


def _compute_listing_keys(conn: sqlite3.Connection) -> None:
    from cmr.store.sqlite import summaries  # loaded for an upgrade only

    summaries.backfill_keys(conn)


#: Every schema version in order: a new version is one entry at the end. Their data functions
#: are written with the store's current code, so they run once every statement has
#: (``migrations.upgrade(..., data_last=True)``).
STEPS: Final = (
    Step(1, "processes, methods, threads, sequences, batches, counters", BASE_SCHEMA),
    Step(2, "hand-offs", HANDOFFS_SCHEMA),
    Step(3, "each process's heartbeat interval", HEARTBEAT_SCHEMA),
    Step(4, "stack samples, their frames, each process's sampler report", SAMPLES_SCHEMA),
    Step(5, "the sequences a process dropped events of", LOST_SEQS_SCHEMA),
    Step(6, "batches stored as they arrived", PACKED_SCHEMA, _move_legacy_rows),
    Step(7, "listing lines kept at ingest", SUMMARY_SCHEMA),
    Step(8, "the exception the root raised", ROOT_ERROR_SCHEMA, _compute_listing_lines),
    Step(9, "listing keys on each sequence, indexed", LISTING_KEYS_SCHEMA, _compute_listing_keys),
    Step(10, "the sampler's paced interval in its report", SAMPLER_INTERVALS_SCHEMA),
    Step(11, "the methods each sequence ran, on its batch_seqs row", BATCH_METHODS_SCHEMA),
    Step(12, "the time windows of drops whose sequences were not named", LOST_WINDOWS_SCHEMA),
    Step(13, "request-shaped sequences stored as one row each", SINGLE_ROWS_SCHEMA),
    Step(14, "the samples the sampler dropped, in its report", SAMPLER_DROPS_SCHEMA),
    Step(15, "sequences appended to, their duration index by band", APPENDED_SEQUENCES_SCHEMA),
    Step(16, "single rows listed by their blocks", SINGLE_BLOCKS_SCHEMA, _backfill_blocks),
)
SCHEMA_VERSION: Final = latest(STEPS)
#: A fresh file: every step's statements, then its version.
SCHEMA: Final = (
    *(statement for step in STEPS for statement in step.statements),
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

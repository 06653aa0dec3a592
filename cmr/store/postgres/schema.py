"""The PostgreSQL repository's schema, as the ordered list of migrations that builds it.

Each migration is applied once, in order, inside one transaction, and recorded in
``schema_migrations``; ``postgres_migrate`` checks the list at every start. Never edit a
migration that has shipped: append a new one.

Event tables (``starts``, ``ends``, ``handoffs``, ``samples``) are partitioned by range on a
``day`` column: the day (UTC, days since the epoch) of the row's own time, clamped into a window
around the repository's clock (``postgres_partitions``). A partition is created the first time a
row needs it and dropped whole by ``prune`` once every row in it is older than the cutoff. A key
that includes ``day`` is all PostgreSQL can enforce on a partitioned table, so "the first write
of an event key wins" holds within a day; readers take the earliest day's row when a forged
duplicate sits in two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from cmr.store._shared import LOST_GRACE_MS, MISSED_HEARTBEATS


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
    "starts": "start_ns",
    "ends": "end_ns",
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

MIGRATIONS: Final = (
    Migration(1, "processes, events partitioned by day, samples, counters", _CORE),
    Migration(2, "invocation attributes", _ATTRIBUTES),
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
#: Rows are sorted by seq, so concurrent nodes lock shared sequence rows in one order.
UPSERT_SEQUENCES: Final = """
    INSERT INTO sequences AS q
    SELECT * FROM unnest(%s::bytea[], %s::bigint[]) ORDER BY 1
    ON CONFLICT (seq) DO UPDATE SET start_ns = least(q.start_ns, excluded.start_ns)"""
UPSERT_COUNTERS: Final = """
    INSERT INTO counters AS c VALUES (%s, %s, %s, %s, %s)
    ON CONFLICT (node) DO UPDATE SET
        batches = c.batches + excluded.batches,
        duplicate_batches = c.duplicate_batches + excluded.duplicate_batches,
        events = c.events + excluded.events,
        samples = c.samples + excluded.samples"""
UPSERT_SAMPLER: Final = """
    INSERT INTO samplers AS s VALUES (%s, %s, %s, %s, %s, %s)
    ON CONFLICT (puid) DO UPDATE SET
        mode = excluded.mode, interval_ms = excluded.interval_ms, ticks = excluded.ticks,
        late_ticks = excluded.late_ticks, cost_ns = excluded.cost_ns
    WHERE excluded.ticks >= s.ticks"""
UPSERT_SAMPLE_THREADS: Final = """
    INSERT INTO sample_threads AS t
    SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) ORDER BY 1, 2
    ON CONFLICT (puid, tid) DO UPDATE
    SET longest_ns = greatest(t.longest_ns, excluded.longest_ns)"""

INVOCATIONS: Final = """
    SELECT DISTINCT ON (s.puid, s.iid)
           s.puid, s.iid, s.parent, s.hid, s.tid, s.method, s.start_ns, e.end_ns, e.error
    FROM starts s LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid
    WHERE s.seq = %(seq)s
    ORDER BY s.puid, s.iid, s.day, e.day"""
ATTRIBUTES: Final = """
    SELECT a.puid, a.iid, a.attributes FROM attributes a
    WHERE (a.puid, a.iid) IN (SELECT puid, iid FROM starts WHERE seq = %(seq)s)
    ORDER BY a.puid, a.iid, a.batch_no"""
#: _shared.is_lost in SQL, for the process ``p`` at the time bound to ``%(now)s``.
FINISHED: Final = f"""(p.ended OR (
    p.heartbeat_ms > 0
    AND %(now)s - p.last_seen_ns
        > ({MISSED_HEARTBEATS} * p.heartbeat_ms + {LOST_GRACE_MS})::bigint * 1000000
))"""
#: Invocations, threads, processes, open invocations that may still end, open ones that never
#: will.
COUNTS: Final = f"""
    SELECT count(*), count(DISTINCT (s.puid, s.tid)), count(DISTINCT s.puid),
           count(*) FILTER (WHERE e.iid IS NULL AND NOT {FINISHED}),
           count(*) FILTER (WHERE e.iid IS NULL AND {FINISHED})
    FROM starts s
    LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid
    JOIN processes p ON p.puid = s.puid
    WHERE s.seq = %(seq)s"""
# The ORDER BY restates _shared.root_rank.
ROOT: Final = """
    SELECT s.parent, s.hid, s.method, e.end_ns, m.module, m.qualname
    FROM starts s
    LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid
    LEFT JOIN methods m ON m.puid = s.puid AND m.method = s.method
    WHERE s.seq = %(seq)s
    ORDER BY s.parent != 0, s.hid != 0, s.start_ns, s.puid, s.iid LIMIT 1"""
#: _shared.RemoteEntries of a sequence: only asked when it has no true root.
REMOTE_ENTRIES: Final = """
    SELECT count(*), count(*) FILTER (WHERE e.iid IS NULL), max(e.end_ns)
    FROM starts s
    LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid
    WHERE s.seq = %(seq)s AND s.parent = 0 AND s.hid != 0
      AND NOT EXISTS (SELECT 1 FROM handoffs h WHERE h.hid = s.hid)"""
LOSSY: Final = "SELECT 1 FROM lost_seqs WHERE seq = %(seq)s LIMIT 1"
PROCESS_COLUMNS: Final = (
    "puid, pid, host, platform_id, argv, ended, dropped, last_seen_ns, heartbeat_ms"
)
#: The hand-offs a sequence's tree needs: those recorded in it, and those its invocations
#: continue (found by hid alone); the earliest day's row of a hid wins.
WITH_HANDOFFS: Final = """
    WITH seq_handoffs AS (
        SELECT DISTINCT ON (hid) hid, puid, parent, kind, method, submitted_ns FROM (
            SELECT * FROM handoffs WHERE seq = %(seq)s
            UNION ALL
            SELECT h.* FROM starts s JOIN handoffs h ON h.hid = s.hid
            WHERE s.seq = %(seq)s AND s.hid != 0
        ) found ORDER BY hid, day
    )"""
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
SEQUENCES_WITH: Final = f"""
    WITH wanted AS ({NAMED_METHODS})
    SELECT q.seq FROM sequences q
    WHERE q.start_ns >= %(since)s AND EXISTS (
        SELECT 1 FROM starts s
        WHERE s.seq = q.seq AND (s.puid, s.method) IN (SELECT puid, method FROM wanted)
    )
    ORDER BY q.start_ns DESC, q.seq DESC LIMIT %(limit)s"""

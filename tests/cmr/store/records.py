"""Records and helpers the store tests share."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import msgspec

from cmr.store import Store
from cmr.store.base import SORT_DURATION, SamplerRecord, SequenceQuery
from cmr.store.listing import (
    FIRST_KEY,
    FIRST_LONGEST_KEY,
    LONGEST,
    NEWEST,
    UNDECIDED,
    UNENDED,
)
from cmr.store.listing_sql import Dialect, Plan, key_params, picked
from cmr.store.sqlite.schema import (
    BATCH_METHODS_SCHEMA,
    HANDOFFS_SCHEMA,
    HEARTBEAT_SCHEMA,
    LEGACY_EVENTS_SCHEMA,
    LISTING_KEYS_SCHEMA,
    LOST_SEQS_SCHEMA,
    LOST_WINDOWS_SCHEMA,
    PACKED_SCHEMA,
    ROOT_ERROR_SCHEMA,
    SAMPLER_DROPS_SCHEMA,
    SAMPLER_INTERVALS_SCHEMA,
    SAMPLES_SCHEMA,
    SINGLE_ROWS_SCHEMA,
    STEPS,
    SUMMARY_SCHEMA,
)
from invoseq import wire

BatchFactory = Callable[..., wire.Batch]
encode = msgspec.msgpack.Encoder().encode


def seq_id(hex_prefix: str) -> bytes:
    """A sequence id starting with ``hex_prefix`` (zero-padded)."""
    return bytes.fromhex(hex_prefix.ljust(32, "0"))


def start(
    iid: int, t_ns: int, seq: bytes, *, parent: int = 0, hid: int = 0, method: int = 1
) -> wire.Start:
    return wire.Start(iid=iid, parent=parent, hid=hid, method=method, t_ns=t_ns, seq=seq)


def handoff(
    hid: int, parent: int, t_ns: int, seq: bytes, *, kind: str = "thread", method: int = 9
) -> wire.Handoff:
    return wire.Handoff(hid=hid, parent=parent, kind=kind, method=method, t_ns=t_ns, seq=seq)


S = seq_id("5e9")
H = 0x5EED_0000_0000_0001


def older_schema(path: str, version: int) -> None:
    """Write a repository as release ``version`` did: version 6 kept no listing lines, versions 1
    to 5 kept a row per Start and End instead of packed batches, version 4 had no lost sequences
    table, version 3 no sample tables either, version 2 no heartbeat column either, version 1 no
    hand-offs table either. It holds one process (seen at 123) and one running call."""
    left_out = (
        SUMMARY_SCHEMA
        + ROOT_ERROR_SCHEMA
        + LISTING_KEYS_SCHEMA
        + SAMPLER_INTERVALS_SCHEMA
        + BATCH_METHODS_SCHEMA
        + LOST_WINDOWS_SCHEMA
        + SINGLE_ROWS_SCHEMA
        + SAMPLER_DROPS_SCHEMA
        + (PACKED_SCHEMA if version < 6 else LEGACY_EVENTS_SCHEMA)
        + {
            6: (),
            5: (),
            4: LOST_SEQS_SCHEMA,
            3: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA,
            2: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA + HEARTBEAT_SCHEMA,
            1: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA + HEARTBEAT_SCHEMA + HANDOFFS_SCHEMA,
        }[version]
    )
    before_appended = [s for step in STEPS if step.version < 15 for s in step.statements]
    with sqlite3.connect(path) as conn:
        for statement in (*before_appended, *LEGACY_EVENTS_SCHEMA):
            if statement not in left_out:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute(
            "INSERT INTO processes (puid, pid, host, platform_id, argv, clock_offset_ns, "
            "started_ns, ended, dropped, last_seen_ns) "
            "VALUES (7, 4242, 'old', 'pf', '[\"old.py\"]', 0, 0, 0, 0, 123)"
        )
        if version < 6:
            conn.execute("INSERT INTO starts VALUES (7, 1, ?, 0, 0, 1, 1, 100)", (S,))
        else:
            chunks = [wire.ThreadChunk(1, [start(1, 100, S)])]
            conn.execute("INSERT INTO batches VALUES (7, 1, 123, 1, 0, ?)", (encode(chunks),))
            conn.execute("INSERT INTO batch_seqs VALUES (?, 7, 1)", (S,))
            conn.execute("INSERT INTO seq_methods VALUES (?, 7, 1, ?)", (S, encode([1])))
        conn.execute("INSERT INTO sequences VALUES (?, 100)", (S,))
    conn.close()


def user_version(path: str) -> int:
    with sqlite3.connect(path) as conn:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    return version


_RAISED, _SLOW, _RUNNING = seq_id("e77"), seq_id("510"), seq_id("7a")


def keyed_batches(make_batch: BatchFactory) -> list[wire.Batch]:
    """Three sequences whose listing keys an upgrade must compute: one whose root raised after
    10 ms, one of 500 ms whose root a later batch ended, one still running."""
    ms = 1_000_000
    events = [start(1, 100 * ms, _RAISED), wire.Error(1, 110 * ms, "ValueError")]
    events += [start(2, 300 * ms, _SLOW, method=2), start(3, 305 * ms, _RUNNING)]
    methods = {1: "a.f", 2: "a.slow"}
    return [
        make_batch(7, 1, {1: events}, methods=methods),
        make_batch(7, 2, {1: [wire.End(2, 800 * ms)]}, methods=methods),
    ]


def check_keys_computed_on_upgrade(
    opened: Callable[[], Store], make_batch: BatchFactory, downgrade: Callable[[], None]
) -> None:
    """Store ``keyed_batches`` in the repository ``opened`` gives, ``downgrade`` it to the
    schema before listing keys, open it again (which upgrades it) and query it."""
    store = opened()
    try:
        for batch in keyed_batches(make_batch):
            store.ingest(batch, 1)
    finally:
        store.close()
    downgrade()
    store = opened()
    try:
        check_keyed_sequences_found(store)
    finally:
        store.close()


def _reports_across_upgrade(
    opened: Callable[[], Store],
    make_batch: BatchFactory,
    downgrade: Callable[[], None],
    reports: tuple[wire.SamplerReport, wire.SamplerReport],
) -> tuple[SamplerRecord, SamplerRecord]:
    """Store the first report in the repository ``opened`` gives, ``downgrade`` it, open it
    again (which upgrades it): the first report as read then, and the second once stored."""
    store = opened()
    try:
        store.ingest(make_batch(7, 1, {}, sampler=reports[0]), 1)
    finally:
        store.close()
    downgrade()
    store = opened()
    try:
        upgraded = store.stats().samplers[7]
        store.ingest(make_batch(7, 2, {}, sampler=reports[1]), 2)
        return upgraded, store.stats().samplers[7]
    finally:
        store.close()


def check_sampler_reports_kept_on_upgrade(
    opened: Callable[[], Store], make_batch: BatchFactory, downgrade: Callable[[], None]
) -> None:
    """A paced sampler report, stored before a ``downgrade`` to the schema before the paced
    interval, reads as unpaced (0) once upgraded, and a later report keeps its paced interval."""
    first = wire.SamplerReport("cpu", 10, 500, 3, 9_000_000, 15_000_000, 20_000_000)
    later = wire.SamplerReport("cpu", 10, 600, 3, 9_500_000, 12_000_000, 20_000_000)
    upgraded, paced = _reports_across_upgrade(opened, make_batch, downgrade, (first, later))
    assert upgraded == SamplerRecord("cpu", 10, 500, 3, 9_000_000, 0, 0)
    assert paced == SamplerRecord("cpu", 10, 600, 3, 9_500_000, 12_000_000, 20_000_000)


def check_sampler_drops_kept_on_upgrade(
    opened: Callable[[], Store], make_batch: BatchFactory, downgrade: Callable[[], None]
) -> None:
    """A sampler report, stored before a ``downgrade`` to the schema before the samples dropped
    were kept, is kept once upgraded with none dropped (0), and a later report keeps its count."""
    first = wire.SamplerReport("wall", 10, 500, 3, 9_000_000, 10_000_000, 20_000_000, 7)
    later = wire.SamplerReport("wall", 10, 600, 3, 9_500_000, 10_000_000, 20_000_000, 9)
    upgraded, counted = _reports_across_upgrade(opened, make_batch, downgrade, (first, later))
    assert upgraded == SamplerRecord("wall", 10, 500, 3, 9_000_000, 10_000_000, 20_000_000, 0)
    assert counted == SamplerRecord("wall", 10, 600, 3, 9_500_000, 10_000_000, 20_000_000, 9)


RAN, OTHER, HANDED = seq_id("a1"), seq_id("b2"), seq_id("c3")


def check_methods_kept_on_upgrade(
    opened: Callable[[], Store], make_batch: BatchFactory, downgrade: Callable[[], None]
) -> None:
    """Store sequences that ran methods (and one a batch has only a Handoff of) in the repository
    ``opened`` gives, ``downgrade`` it to the schema that kept their methods in a table of their
    own, open it again (which upgrades it): each method still finds the sequence that ran it."""
    events = [start(1, 100, RAN, method=2), wire.End(1, 150), start(2, 200, OTHER)]
    events.append(handoff(H, 2, 210, HANDED))
    store = opened()
    try:
        store.ingest(make_batch(7, 1, {1: events}, methods={1: "a.f", 2: "a.g"}), 1)
    finally:
        store.close()
    downgrade()
    store = opened()
    try:
        found = {
            name: store.find_sequences(name, since_ns=None, limit=5) for name in ("a.f", "a.g")
        }
    finally:
        store.close()
    assert found == {"a.f": [OTHER], "a.g": [RAN]}


def check_keyed_sequences_found(store: Store) -> None:
    """The queries the keys serve find ``keyed_batches``' sequences."""

    def seqs(**query: object) -> list[bytes]:
        lines = store.list_sequences(10, SequenceQuery(**query))  # type: ignore[arg-type]
        return [line.seq for line in lines]

    assert seqs(min_duration_ns=100_000_000) == [_SLOW]
    assert seqs(status="error") == [_RAISED]
    assert seqs(root="a.f") == [_RUNNING, _RAISED]
    assert seqs(sort=SORT_DURATION) == [_SLOW, _RAISED, _RUNNING]


def page_statements(query: SequenceQuery, dialect: Dialect) -> list[tuple[str, dict[str, object]]]:
    """The statement and parameters of every kind of page ``query`` reads (first pages; the
    pattern matching names ``a.f`` and ``a.g``, its duration range narrow), to see how a
    database plans them."""
    statements = []
    for kind in (NEWEST, LONGEST, UNENDED, UNDECIDED):
        sql, params = picked(kind, query, Plan(["a.f", "a.g"], few_durations=True), dialect)
        key = FIRST_LONGEST_KEY if kind == LONGEST else FIRST_KEY
        statements.append((sql, params | key_params(key, 256)))
    return statements


#: Listing queries and the index each must be served by, in every database's plan.
INDEXED_QUERIES: list[tuple[SequenceQuery, str]] = [
    (SequenceQuery(root="a.*"), "sequences_by_root"),
    (SequenceQuery(status="error"), "sequences_failed"),
    (SequenceQuery(min_duration_ns=1), "sequences_by_duration"),
    (SequenceQuery(sort=SORT_DURATION), "sequences_by_duration"),
    (SequenceQuery(root="a.*", sort=SORT_DURATION), "sequences_by_root"),
    (SequenceQuery(status="running"), "open_calls_by_seq"),
    # The status is the root's: a decided row's own end says complete, no open call is read.
    (SequenceQuery(status="complete"), "sequences_by_start"),
]


#: The columns version 13 added to ``sequences`` (``SINGLE_ROWS_SCHEMA``).
SINGLE_ROW_COLUMNS = ("one_puid", "one_tid", "one_iid", "one_method", "one_batch", "one_methods")


def without_single_blocks(conn: sqlite3.Connection) -> None:
    """Make a file as version 15 kept it: no blocks of single rows, the root and duration
    indexes holding every row."""
    query = "SELECT count(*) FROM sqlite_schema WHERE name = 'single_blocks'"
    if not conn.execute(query).fetchone()[0]:
        return  # made so already
    conn.execute("DROP TABLE single_block_roots")
    conn.execute("DROP TABLE single_block_batches")
    conn.execute("DROP TABLE single_blocks")
    conn.execute("DROP INDEX sequences_undecided")
    [by_batch] = [s for s in SINGLE_ROWS_SCHEMA if "sequences_by_batch" in s]
    conn.execute(by_batch)
    for step in STEPS:
        if step.version == 15:
            for statement in step.statements:
                if statement.startswith("CREATE INDEX sequences_by_"):
                    name = statement.split()[2]
                    if name in {"sequences_by_root", "sequences_by_duration"}:
                        conn.execute(f"DROP INDEX IF EXISTS {name}")
                        conn.execute(statement)


def keyed_by_seq(conn: sqlite3.Connection) -> None:
    """Make a file's ``sequences`` as version 14 kept it: keyed by the sequence id (no rowid),
    its duration index by the duration itself."""
    without_single_blocks(conn)
    query = "SELECT sql FROM sqlite_schema WHERE name = 'sequences'"
    if "WITHOUT ROWID" in conn.execute(query).fetchone()[0]:
        return  # made so already
    columns = [row[1] for row in conn.execute("PRAGMA table_info(sequences)")]
    conn.execute(
        "CREATE TABLE sequences_keyed (seq BLOB PRIMARY KEY, start_ns INTEGER NOT NULL, "
        "invocations INTEGER NOT NULL DEFAULT 0, root_name TEXT, end_ns INTEGER, error TEXT, "
        "one_puid INTEGER, one_tid INTEGER, one_iid INTEGER, one_method INTEGER, "
        "one_batch INTEGER, one_methods BLOB) WITHOUT ROWID"
    )
    listed = ", ".join(columns)
    conn.execute(f"INSERT INTO sequences_keyed ({listed}) SELECT {listed} FROM sequences")
    conn.execute("DROP TABLE sequences")
    conn.execute("ALTER TABLE sequences_keyed RENAME TO sequences")
    for step in STEPS:
        if step.version < 15:
            for statement in step.statements:
                if statement.startswith("CREATE INDEX sequences_"):
                    conn.execute(statement)


def without_sampler_drops(conn: sqlite3.Connection) -> None:
    """Make a file's sampler reports as version 13 wrote them: without version 14's count of
    the samples dropped (and its ``sequences`` as version 14 kept it: ``keyed_by_seq``)."""
    keyed_by_seq(conn)
    if "dropped_samples" in {row[1] for row in conn.execute("PRAGMA table_info(samplers)")}:
        conn.execute("ALTER TABLE samplers DROP COLUMN dropped_samples")


def without_single_rows(conn: sqlite3.Connection) -> None:
    """Make a file's sequences as version 12 wrote them: every single-row sequence in the side
    tables (``single.spread``), and ``sequences`` without version 13's index and columns (and
    what later versions added: ``without_sampler_drops``)."""
    from cmr.store.sqlite import single

    without_sampler_drops(conn)
    if "one_batch" not in {row[1] for row in conn.execute("PRAGMA table_info(sequences)")}:
        return  # made so already
    query = "SELECT seq FROM sequences WHERE one_batch IS NOT NULL"
    single.spread(conn, [seq for (seq,) in conn.execute(query)])
    conn.execute("DROP INDEX sequences_by_batch")
    for column in SINGLE_ROW_COLUMNS:
        conn.execute(f"ALTER TABLE sequences DROP COLUMN {column}")


def postgres_without_single_blocks(pg_url: str) -> None:
    """Make a PostgreSQL repository as migration 10 left it: no blocks of single rows, the
    start, root and duration indexes holding every row, migration 11's row in
    ``schema_migrations`` gone."""
    from cmr.store.postgres.connect import connect
    from cmr.store.postgres.schema import LISTING_KEYS

    with connect(pg_url) as conn, conn.transaction():
        conn.execute("DROP TABLE single_block_roots, single_blocks")
        conn.execute("DROP INDEX sequences_undecided, sequences_by_start")
        conn.execute("CREATE INDEX sequences_by_start ON sequences (start_ns, seq)")
        for statement in LISTING_KEYS:
            name = statement.split()[2] if statement.startswith("CREATE INDEX") else None
            if name in {"sequences_by_root", "sequences_by_duration"}:
                conn.execute(f"DROP INDEX {name}")
                conn.execute(statement)
        conn.execute("DELETE FROM schema_migrations WHERE version >= 11")


def postgres_without_single_rows(pg_url: str) -> None:
    """Make a PostgreSQL repository's sequences as migration 9 left them: every single-row
    sequence in the side tables (``single.spread``), and ``sequences`` without migration 10's
    index and columns, its row in ``schema_migrations`` gone."""
    from cmr.store.postgres import single
    from cmr.store.postgres.connect import connect

    postgres_without_single_blocks(pg_url)
    with connect(pg_url) as conn, conn.transaction():
        rows = conn.execute("SELECT seq FROM sequences WHERE one_batch IS NOT NULL ORDER BY seq")
        single.spread(conn, [bytes(seq) for (seq,) in rows.fetchall()])
        conn.execute("DROP INDEX sequences_by_batch")
        columns = ", ".join(f"DROP COLUMN {column}" for column in SINGLE_ROW_COLUMNS)
        conn.execute(f"ALTER TABLE sequences {columns}")
        conn.execute("DELETE FROM schema_migrations WHERE version >= 10")


def repository_rows(db: str, query: str) -> list[tuple[object, ...]]:
    """``query``'s rows in repository ``db`` (a SQLite file or a PostgreSQL URL), read beside
    its store."""
    if db.startswith("postgresql:"):
        import psycopg

        with psycopg.connect(db) as pg:
            return list(pg.execute(query).fetchall())
    conn = sqlite3.connect(db)
    try:
        return list(conn.execute(query).fetchall())
    finally:
        conn.close()


def single_row_count(db: str) -> int:
    """How many sequences repository ``db`` keeps as single rows (``cmr.store.single_rows``)."""
    [(count,)] = repository_rows(db, "SELECT count(*) FROM sequences WHERE one_batch IS NOT NULL")
    return int(str(count))

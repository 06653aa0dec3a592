"""The PostgreSQL store's schema: a fresh database gets every migration once however many nodes
start at once; an older schema is upgraded by a writer, keeping what it stored (rows, listing
keys, sampler reports, the methods its sequences ran), and refused by a reader; a newer one is
refused, and a database without a repository read clearly; each listing query is served by its
index.
Runs against the server INVOSEQ_TEST_PG names (see conftest.py), each test in its own schema."""

from __future__ import annotations

import msgspec
import pytest

from cmr.store import Store, StoreError, open_store
from cmr.store.base import SequenceQuery
from cmr.store.listing_sql import POSTGRES
from cmr.store.postgres.connect import connect
from cmr.store.postgres.migrate import SCHEMA_VERSION, migrate
from cmr.store.postgres.partitions import create_partitions
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock
from tests.cmr.store.postgres_support import TODAY
from tests.cmr.store.postgres_support import run_together as _run_together
from tests.cmr.store.postgres_support import tables as _tables
from tests.cmr.store.records import (
    INDEXED_QUERIES,
    BatchFactory,
    check_keys_computed_on_upgrade,
    check_methods_kept_on_upgrade,
    check_sampler_drops_kept_on_upgrade,
    check_sampler_reports_kept_on_upgrade,
    page_statements,
    postgres_without_single_rows,
    seq_id,
    start,
)

pytestmark = pytest.mark.postgres


def _versions(url: str) -> list[int]:
    with connect(url) as conn:
        rows = conn.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    return [int(version) for (version,) in rows]


def test_a_fresh_database_gets_every_migration_once_even_when_two_nodes_start_at_once(
    pg_url: str,
) -> None:
    opened: list[Store] = []
    _run_together(
        lambda: opened.append(open_store(pg_url)), lambda: opened.append(open_store(pg_url))
    )
    for store in opened:
        store.close()

    assert _versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


def test_an_older_schema_is_upgraded_by_a_writer_and_refused_by_a_reader(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    with connect(pg_url) as conn:
        assert migrate(conn, "test", upto=1) == 1
    assert "attributes" not in _tables(pg_url)

    with pytest.raises(StoreError, match=r"schema version 1, older than .* run `cmr serve`"):
        open_store(pg_url, readonly=True)
    store = open_store(pg_url, clock=clock)
    try:
        batch = make_batch(7, 1, {1: [start(1, 100, seq_id("5e")), wire.Attrs(1, {"k": 1.5})]})
        store.ingest(batch, 1)
        (record,) = store.load_sequence(seq_id("5e")).invocations
    finally:
        store.close()

    assert _versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))
    assert record.attributes == {"k": 1.5}


def _row_tables_of_version_2(url: str) -> None:
    """A version 2 repository as its code stored events: a row per Start, End and invocation's
    attributes, in day partitions. Sequence 5e: a root (1) that ended, a child (2) that raised,
    a child (3) still open, a Start (2) forged again a day later (the earlier day's wins), an
    End (9) whose Start had not arrived, and attributes of 1 from two batches."""
    seq = seq_id("5e")
    t0 = CLOCK_OFFSET_NS
    with connect(url) as conn:
        assert migrate(conn, "test", upto=2) == 2
        create_partitions(conn, [("starts", TODAY), ("starts", TODAY + 1), ("ends", TODAY)])
        conn.execute(
            "INSERT INTO processes VALUES (7, 42, 'h', 'p', '{app.py}', 0, %s, false, 0, %s, 0)",
            (t0, t0 + 10_000),
        )
        conn.execute("INSERT INTO methods VALUES (7, 1, 'app', 'm1', 'app.py', 1)")
        conn.execute("INSERT INTO threads VALUES (7, 1, 101, 'MainThread')")
        conn.execute("INSERT INTO sequences VALUES (%s, %s)", (seq, t0 + 100))
        conn.execute("INSERT INTO batches VALUES (7, 1, %s, 9)", (t0 + 10_000,))
        for iid, parent, start_ns, day in (
            (1, 0, 100, TODAY),
            (2, 1, 200, TODAY),
            (3, 1, 300, TODAY),
            (2, 1, 250, TODAY + 1),
        ):
            conn.execute(
                "INSERT INTO starts VALUES (7, %s, %s, %s, 0, 1, 1, %s, %s)",
                (iid, seq, parent, t0 + start_ns, day),
            )
        for iid, end_ns, error in ((1, 1_000, None), (2, 400, "ValueError"), (9, 500, None)):
            conn.execute(
                "INSERT INTO ends VALUES (7, %s, %s, %s, %s)", (iid, t0 + end_ns, error, TODAY)
            )
        for batch_no, attributes in ((1, {"k": 1, "a": "x"}), (2, {"k": 2})):
            conn.execute(
                "INSERT INTO attributes VALUES (7, 1, %s, %s)",
                (batch_no, msgspec.msgpack.encode(attributes)),
            )


def test_a_version_2_repository_s_rows_become_stored_batches_with_listing_lines(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    _row_tables_of_version_2(pg_url)
    seq = seq_id("5e")

    store = open_store(pg_url, clock=clock)
    try:
        (line,) = store.list_sequences(10)
        moved = {r.iid: r for r in store.load_sequence(seq).invocations}
        # The End of 9 was stored before its Start: the Start finds it.
        store.ingest(make_batch(7, 2, {1: [start(9, 450, seq, parent=1)]}), 1)
        late = {r.iid: r for r in store.load_sequence(seq).invocations}[9]
        (after,) = store.list_sequences(10)
    finally:
        store.close()

    assert _versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))
    assert not {"starts", "ends", "attributes"} & _tables(pg_url)
    t0 = CLOCK_OFFSET_NS
    assert {iid: (r.parent, r.start_ns, r.end_ns, r.error) for iid, r in moved.items()} == {
        1: (0, t0 + 100, t0 + 1_000, None),
        2: (1, t0 + 200, t0 + 400, "ValueError"),
        3: (1, t0 + 300, None, None),
    }
    assert moved[1].attributes == {"k": 2, "a": "x"}
    assert (line.root, line.invocations, line.end_ns, line.status) == (
        "app.m1",
        3,
        t0 + 1_000,
        "complete",  # the root ended; call 3, still open, is detached
    )
    assert (late.end_ns, after.invocations) == (t0 + 500, 4)


def test_a_version_4_repository_gets_its_listing_keys_and_queries_find_its_sequences(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    def downgrade() -> None:  # back to what version 4 wrote
        _downgrade(
            pg_url,
            "DROP INDEX sequences_by_root, sequences_by_duration, sequences_failed; "
            "ALTER TABLE sequences DROP COLUMN root_name, DROP COLUMN end_ns, "
            f"DROP COLUMN error; {_DROP_SAMPLER_INTERVALS}; {_SPLIT_BATCH_METHODS}; "
            f"{_DROP_SAMPLER_DROPS}; DELETE FROM schema_migrations WHERE version >= 5",
        )

    check_keys_computed_on_upgrade(lambda: open_store(pg_url, clock=clock), make_batch, downgrade)
    assert _versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


#: What version 6 added: the sampler's paced interval in its report.
_DROP_SAMPLER_INTERVALS = (
    "ALTER TABLE samplers DROP COLUMN current_interval_ns, DROP COLUMN longest_interval_ns"
)


#: What version 9 added: the samples the sampler dropped, in its report.
_DROP_SAMPLER_DROPS = "ALTER TABLE samplers DROP COLUMN dropped_samples"


#: What version 7 changed: the methods each sequence ran in a batch were a table of their own.
_SPLIT_BATCH_METHODS = (
    "CREATE TABLE seq_methods (seq bytea NOT NULL, puid bigint NOT NULL, "
    "batch_no bigint NOT NULL, methods bytea NOT NULL, PRIMARY KEY (seq, puid, batch_no)); "
    "INSERT INTO seq_methods SELECT seq, puid, batch_no, methods FROM batch_seqs "
    "WHERE methods IS NOT NULL; "
    "ALTER TABLE batch_seqs DROP COLUMN methods"
)


def _downgrade(pg_url: str, statements: str) -> None:
    """Back to a version before single rows (migration 10), then ``statements``."""
    postgres_without_single_rows(pg_url)
    with connect(pg_url) as conn:
        conn.execute(statements)
        conn.commit()


def test_a_version_5_repository_keeps_its_sampler_reports_and_reads_them_as_unpaced(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    def downgrade() -> None:  # back to what version 5 wrote
        _downgrade(
            pg_url,
            f"{_DROP_SAMPLER_INTERVALS}; {_SPLIT_BATCH_METHODS}; {_DROP_SAMPLER_DROPS}; "
            "DELETE FROM schema_migrations WHERE version >= 6",
        )

    check_sampler_reports_kept_on_upgrade(
        lambda: open_store(pg_url, clock=clock), make_batch, downgrade
    )
    assert _versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


def test_a_version_6_repository_keeps_the_methods_its_sequences_ran(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    def downgrade() -> None:  # back to what version 6 wrote
        _downgrade(
            pg_url,
            f"{_SPLIT_BATCH_METHODS}; {_DROP_SAMPLER_DROPS}; "
            "DELETE FROM schema_migrations WHERE version >= 7",
        )

    check_methods_kept_on_upgrade(lambda: open_store(pg_url, clock=clock), make_batch, downgrade)
    assert _versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


def test_a_version_8_repository_keeps_its_sampler_reports_and_reads_them_without_drops(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    def downgrade() -> None:  # back to what version 8 wrote
        _downgrade(
            pg_url, f"{_DROP_SAMPLER_DROPS}; DELETE FROM schema_migrations WHERE version >= 9"
        )

    check_sampler_drops_kept_on_upgrade(
        lambda: open_store(pg_url, clock=clock), make_batch, downgrade
    )
    assert _versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.parametrize(("query", "index"), INDEXED_QUERIES)
def test_each_listing_query_is_served_by_its_index(
    pg_url: str, query: SequenceQuery, index: str
) -> None:
    # With sequential scans priced out, the planner must find an index for every page a query
    # reads, and the one its field has, among rows of many root names and durations (their
    # statistics gathered: an empty table's plans are a toss-up between the indexes).
    open_store(pg_url).close()
    plans: list[str] = []
    with connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO sequences (seq, start_ns, invocations, root_name, end_ns, error) "
            "SELECT decode(lpad(to_hex(i), 32, '0'), 'hex'), i * 1000, 1, 'a.m' || (i % 500), "
            "i * 1000 + i % 997, CASE WHEN i % 1000 = 0 THEN 'Failed' END "
            "FROM generate_series(1, 20000) AS i"
        )
        conn.execute("ANALYZE sequences")
        conn.execute("SET enable_seqscan = off")
        for sql, params in page_statements(query, POSTGRES):
            rows = conn.execute(f"EXPLAIN {sql}", params).fetchall()
            plans.append("\n".join(str(row[0]) for row in rows))
    assert not [plan for plan in plans if "Seq Scan on sequences" in plan], plans
    assert [plan for plan in plans if index in plan], plans


@pytest.mark.parametrize("readonly", [False, True])
def test_a_newer_schema_is_refused(pg_url: str, readonly: bool) -> None:
    open_store(pg_url).close()
    with connect(pg_url) as conn:
        conn.execute("INSERT INTO schema_migrations (version, name) VALUES (99, 'from the future')")

    with pytest.raises(StoreError, match=r"schema version 99, newer than .*: upgrade invoseq$"):
        open_store(pg_url, readonly=readonly)


def test_reading_a_database_without_a_repository_fails_clearly(pg_url: str) -> None:
    with pytest.raises(StoreError, match=r"^no invoseq repository in postgresql://"):
        open_store(pg_url, readonly=True)
    assert _tables(pg_url) == set()  # a reader created nothing

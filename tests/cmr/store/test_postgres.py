"""What only the PostgreSQL store does: nodes ingesting at once, schema migrations, day
partitions and their retention, surviving a dropped connection, and the CLI on a URL.

Runs against the server INVOSEQ_TEST_PG names (see conftest.py), each test in its own schema.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import msgspec
import psycopg
import pytest

from cmr.cli import main
from cmr.store import Store, StoreError, open_store
from cmr.store.base import SequenceQuery
from cmr.store.listing_sql import POSTGRES
from cmr.store.postgres.connect import connect
from cmr.store.postgres.migrate import SCHEMA_VERSION, migrate
from cmr.store.postgres.partitions import (
    DAY_NS,
    FUTURE,
    PAST_DAYS,
    create_partitions,
    partition_name,
)
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock
from tests.cmr.store.records import (
    INDEXED_QUERIES,
    BatchFactory,
    check_keys_computed_on_upgrade,
    check_methods_kept_on_upgrade,
    check_sampler_drops_kept_on_upgrade,
    check_sampler_reports_kept_on_upgrade,
    handoff,
    page_statements,
    postgres_without_single_rows,
    seq_id,
    start,
)

pytestmark = pytest.mark.postgres

TODAY = CLOCK_OFFSET_NS // DAY_NS
JOIN_TIMEOUT_S = 60


def _run_together(*work: Callable[[], None]) -> None:
    """Run each callable in a thread of its own, released at once; re-raise the first error."""
    barrier = threading.Barrier(len(work))
    failures: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            barrier.wait(timeout=JOIN_TIMEOUT_S)
            job()
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads)
    if failures:
        raise failures[0]


def _tables(url: str) -> set[str]:
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {str(name) for (name,) in rows}


# -- nodes sharing one database -------------------------------------------------------------


def test_two_nodes_ingesting_the_same_batches_at_once_store_each_exactly_once(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    shared = [seq_id(f"5{n}") for n in range(4)]
    batches = [
        make_batch(
            puid,
            number,
            # Every batch touches the same process row and the same sequence rows.
            {1: [start(number * 10 + k, number * 100 + k, seq) for k, seq in enumerate(shared)]},
        )
        for puid in (7, 8)
        for number in range(1, 21)
    ]
    nodes = [open_store(pg_url, clock=clock) for _ in range(2)]
    stored: list[list[bool]] = [[], []]
    try:
        _run_together(
            lambda: stored[0].extend(nodes[0].ingest(b, 1) for b in batches),
            lambda: stored[1].extend(nodes[1].ingest(b, 1) for b in reversed(batches)),
        )
        stats = nodes[0].stats()
        invocations = [len(nodes[1].load_sequence(seq).invocations) for seq in shared]
    finally:
        for node in nodes:
            node.close()

    # Each batch was stored by exactly one node; the other saw a duplicate.
    assert sum(stored[0]) + sum(stored[1]) == len(batches)
    assert (stats.batches, stats.duplicate_batches) == (len(batches), len(batches))
    assert stats.events == 4 * len(batches)
    assert invocations == [len(batches)] * len(shared)


def test_a_node_survives_the_server_dropping_its_connection(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    url = f"{pg_url}&application_name=dropped_node"
    store = open_store(url, clock=clock)
    try:
        with connect(pg_url) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'dropped_node'"
            )
        assert store.ingest(make_batch(7, 1, {1: [start(1, 100, seq_id("5e"))]}), 1)
        assert len(store.list_sequences(10)) == 1
    finally:
        store.close()


# -- schema migrations ----------------------------------------------------------------------


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


# -- day partitions and retention -----------------------------------------------------------


def test_prune_drops_whole_old_day_partitions_and_deletes_only_the_rest(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    # One sequence per day, ten, nine and zero days ago (event times are relative to the
    # process's clock offset, which make_batch sets to the repository's clock), each with a
    # hand-off (partitioned by day).
    days = {10: seq_id("a10"), 9: seq_id("a09"), 0: seq_id("a00")}
    store = open_store(pg_url, clock=clock)
    try:
        for number, (ago, seq) in enumerate(sorted(days.items()), start=1):
            t = -ago * DAY_NS + 1_000
            events = [start(number, t, seq), handoff(number, number, t + 100, seq)]
            events.append(wire.End(number, t + 500))
            store.ingest(make_batch(7, number, {1: events}), CLOCK_OFFSET_NS + t)
        partitions = _tables(pg_url)
        assert {partition_name("handoffs", TODAY - ago) for ago in days} <= partitions

        # The cutoff falls inside the day nine days ago, after that day's sequence started.
        result = store.prune(CLOCK_OFFSET_NS - 9 * DAY_NS + 2_000)
        left = [s.seq for s in store.list_sequences(10)]
        kept = store.load_sequence(days[0])
    finally:
        store.close()

    assert result.sequences == 2
    assert left == [days[0]]
    assert set(kept.handoffs) == {1}  # today's sequence is the first batch's
    after = _tables(pg_url)
    assert partition_name("handoffs", TODAY - 10) not in after
    assert partition_name("handoffs", TODAY - 9) in after  # partly newer: only rows deleted
    assert partition_name("handoffs", TODAY) in after
    with connect(pg_url) as conn:
        (batches,) = conn.execute("SELECT count(*) FROM batches").fetchone() or (None,)
    assert batches == 1  # the batches received before the cutoff went with their sequences


def test_times_far_from_the_repository_clock_do_not_make_a_partition_each(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    far_past = -5_000 * DAY_NS  # years before the repository's clock
    far_future = 400 * DAY_NS
    events = [start(1, far_past, seq_id("01d")), start(2, far_future, seq_id("f07"))]
    store = open_store(pg_url, clock=clock)
    try:
        store.ingest(make_batch(7, 1, {1: events}), CLOCK_OFFSET_NS)
        moved = [handoff(1, 1, far_past, seq_id("01d")), handoff(2, 2, far_future, seq_id("f07"))]
        store.ingest(make_batch(7, 2, {1: moved}), CLOCK_OFFSET_NS)
        handoffs = {name for name in _tables(pg_url) if name.startswith("handoffs_")}
        assert handoffs == {
            partition_name("handoffs", TODAY - PAST_DAYS),
            partition_name("handoffs", FUTURE),
        }
        # Retention still sees their own times.
        result = store.prune(CLOCK_OFFSET_NS)
        assert [s.seq for s in store.list_sequences(10)] == [seq_id("f07")]
    finally:
        store.close()
    assert result.sequences == 1


# -- the command line on a URL --------------------------------------------------------------


def test_read_commands_and_prune_take_a_postgresql_url(
    pg_url: str, make_batch: BatchFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    seq = seq_id("5e")
    store = open_store(pg_url)
    try:
        store.ingest(make_batch(7, 1, {1: [start(1, 100, seq), wire.End(1, 300)]}), 1)
    finally:
        store.close()

    assert main(["--db", pg_url, "ls", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["seq"] == seq.hex()
    assert main(["show", "5e", "--db", pg_url]) == 0
    assert "app.m1" in capsys.readouterr().out
    assert main(["stats", "--db", pg_url]) == 0
    assert main(["profile", "5e", "--db", pg_url]) == 0
    assert main(["export", "5e", "--format", "chrome", "--db", pg_url]) == 0
    capsys.readouterr()
    # The commands that query many sequences, or follow one's critical path, read it too.
    assert main(["ls", "--root", "app.*", "--status", "complete", "--json", "--db", pg_url]) == 0
    assert [line["seq"] for line in json.loads(capsys.readouterr().out)] == [seq.hex()]
    assert main(["top", "--json", "--db", pg_url]) == 0
    assert json.loads(capsys.readouterr().out)[0]["count"] == 1
    assert main(["show", "5e", "--critical-path", "--json", "--db", pg_url]) == 0
    assert [step["name"] for step in json.loads(capsys.readouterr().out)["path"]] == ["app.m1"]
    assert main(["diff", "5e", "5e", "--json", "--db", pg_url]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"path": "app.m1", "a_ns": 200, "b_ns": 200, "delta_ns": 0}
    ]

    # The sequence started at the test clock's epoch, long before now.
    assert main(["prune", "--older-than", "1d", "--json", "--db", pg_url]) == 0
    assert json.loads(capsys.readouterr().out)["sequences"] == 1
    assert main(["ls", "--db", pg_url]) == 0


def test_a_wrong_password_is_one_line_on_the_command_line(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    wrong = pg_url.replace(f":{info['password']}@", ":not-the-password@", 1)
    assert wrong != pg_url

    assert main(["ls", "--db", wrong]) == 1

    err = capsys.readouterr().err
    assert err.startswith("cmr: cannot connect to postgresql://")
    assert err.count("\n") == 1
    assert "not-the-password" not in err

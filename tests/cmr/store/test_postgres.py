"""What only the PostgreSQL store does: nodes ingesting at once, schema migrations, day
partitions and their retention, surviving a dropped connection, and the CLI on a URL.

Runs against the server INVOSEQ_TEST_PG names (see conftest.py), each test in its own schema.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import psycopg
import pytest

from cmr.cli import main
from cmr.store import Store, StoreError, open_store
from cmr.store.postgres.connect import connect
from cmr.store.postgres.migrate import migrate
from cmr.store.postgres.partitions import DAY_NS, FUTURE, PAST_DAYS, partition_name
from cmr.store.postgres.schema import SCHEMA_VERSION
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock
from tests.cmr.store.records import BatchFactory, seq_id, start
from tracer import wire

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
    # process's clock offset, which make_batch sets to the repository's clock).
    days = {10: seq_id("a10"), 9: seq_id("a09"), 0: seq_id("a00")}
    store = open_store(pg_url, clock=clock)
    try:
        for number, (ago, seq) in enumerate(sorted(days.items()), start=1):
            t = -ago * DAY_NS + 1_000
            events = [start(number, t, seq), wire.End(number, t + 500)]
            store.ingest(make_batch(7, number, {1: events}), CLOCK_OFFSET_NS)
        partitions = _tables(pg_url)
        assert {partition_name("starts", TODAY - ago) for ago in days} <= partitions

        # The cutoff falls inside the day nine days ago, after that day's sequence started.
        result = store.prune(CLOCK_OFFSET_NS - 9 * DAY_NS + 2_000)
        left = [s.seq for s in store.list_sequences(10)]
    finally:
        store.close()

    assert result.sequences == 2
    assert left == [days[0]]
    after = _tables(pg_url)
    assert partition_name("starts", TODAY - 10) not in after
    assert partition_name("ends", TODAY - 10) not in after
    assert partition_name("starts", TODAY - 9) in after  # partly newer: only rows deleted
    assert partition_name("starts", TODAY) in after


def test_times_far_from_the_repository_clock_do_not_make_a_partition_each(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    far_past = -5_000 * DAY_NS  # years before the repository's clock
    far_future = 400 * DAY_NS
    events = [start(1, far_past, seq_id("01d")), start(2, far_future, seq_id("f07"))]
    store = open_store(pg_url, clock=clock)
    try:
        store.ingest(make_batch(7, 1, {1: events}), CLOCK_OFFSET_NS)
        starts = {name for name in _tables(pg_url) if name.startswith("starts_")}
        assert starts == {
            partition_name("starts", TODAY - PAST_DAYS),
            partition_name("starts", FUTURE),
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

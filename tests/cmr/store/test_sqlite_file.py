"""The SQLite repository as a file, and opening repositories: reopening, read-only use, schema
versions and upgrades, refused files, the default location."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest

from cmr.store import (
    StoreError,
    default_db_path,
    open_store,
)
from cmr.store.base import SequenceQuery
from cmr.store.listing import NEWEST
from cmr.store.listing_sql import SQLITE, Plan, picked
from cmr.store.sqlite.reader import SQLiteReader
from cmr.store.sqlite.schema import PACKED_SCHEMA, SCHEMA_VERSION
from cmr.store.sqlite.statements import (
    METHODS_BY_RECENT_SEQUENCE,
    OPEN_CALL,
    REMOTE_ENTRIES,
    SEQUENCE_BATCHES,
    SUMMARIES_OF_PICKED,
    THREAD_COUNTS,
)
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import (
    HANDED,
    INDEXED_QUERIES,
    OTHER,
    RAN,
    BatchFactory,
    H,
    S,
    check_keys_computed_on_upgrade,
    check_methods_kept_on_upgrade,
    check_sampler_drops_kept_on_upgrade,
    check_sampler_reports_kept_on_upgrade,
    handoff,
    older_schema,
    page_statements,
    seq_id,
    start,
    user_version,
    without_sampler_drops,
    without_single_rows,
)


def test_sqlite_repository_survives_reopening(tmp_path: Path, make_batch: BatchFactory) -> None:
    path = str(tmp_path / "cmr.sqlite")
    batch = make_batch(7, 1, {1: [start(1, 100, S), wire.End(1, 200)]})
    store = open_store(path)
    store.ingest(batch, 1)
    store.record_rejected("garbage")
    before = store.load_sequence(S)
    store.close()

    reopened = open_store(path)
    try:
        assert reopened.load_sequence(S) == before
        assert reopened.ingest(batch, 2) is False  # still knows the batch after a restart
        stats = reopened.stats()
        assert (stats.batches, stats.duplicate_batches, stats.rejected) == (1, 1, {"garbage": 1})
    finally:
        reopened.close()


def test_readonly_store_reads_while_a_writer_has_the_file_open(
    tmp_path: Path, make_batch: BatchFactory
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    writer = open_store(path)
    reader = open_store(path, readonly=True)
    try:
        writer.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), 1)
        assert reader.resolve_sequence("5e") == S
        writer.ingest(make_batch(7, 2, {1: [wire.End(1, 200)]}), 2)
        assert reader.list_sequences(1)[0].status == "complete"
        with pytest.raises(StoreError, match="readonly"):
            reader.record_rejected("garbage")
    finally:
        reader.close()
        writer.close()


def test_a_readonly_store_is_the_read_side_alone_and_refuses_every_write(
    tmp_path: Path, make_batch: BatchFactory
) -> None:
    """``open_store(readonly=True)`` opens a ``SQLiteReader``: the reads, without the ingest
    machinery (``cmr ls`` loads none of it); a write is refused in one line."""
    path = str(tmp_path / "cmr.sqlite")
    writer = open_store(path)
    writer.ingest(make_batch(7, 1, {1: [start(1, 100, S), wire.End(1, 200)]}), 1)
    writer.close()
    reader = open_store(path, readonly=True)
    try:
        assert type(reader) is SQLiteReader
        assert [line.seq for line in reader.list_sequences(5)] == [S]
        assert len(reader.load_sequence(S).invocations) == 1
        refused = f"^the repository {path} is open readonly: nothing is written$"
        with pytest.raises(StoreError, match=refused):
            reader.ingest(make_batch(7, 2, {1: [start(2, 300, S)]}), 2)
        with pytest.raises(StoreError, match=refused):
            reader.record_rejected("garbage")
        with pytest.raises(StoreError, match=refused):
            reader.prune(10**18)
        assert reader.stats().batches == 1
    finally:
        reader.close()


def test_readonly_open_of_a_missing_repository_fails_clearly(tmp_path: Path) -> None:
    path = tmp_path / "none" / "cmr.sqlite"

    with pytest.raises(StoreError, match=r"^no repository at .*cmr\.sqlite \(run `cmr serve`"):
        open_store(str(path), readonly=True)
    assert not path.parent.exists()


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()

    with pytest.raises(StoreError, match=r"schema version 99, newer than .* upgrade invoseq"):
        open_store(path)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_an_older_repository_is_upgraded_in_place_when_opened_for_writing(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock, version: int
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    older_schema(path, version)

    store = open_store(path, clock=clock)
    try:
        # What was stored before survives, and its processes promised no heartbeat.
        (old,) = store.load_sequence(S).processes.values()
        assert (old.host, old.last_seen_ns, old.heartbeat_ms, old.state) == ("old", 123, 0, "alive")
        assert store.list_sequences(1)[0].status == "running"

        other = seq_id("07e")
        events = [start(1, 100, other), handoff(H, 1, 110, other)]
        store.ingest(make_batch(8, 1, {1: events}, heartbeat_ms=250, lost_seqs=[S]), 1)
        assert list(store.load_sequence(other).handoffs) == [H]
        assert store.load_sequence(other).processes[8].heartbeat_ms == 250
        assert store.load_sequence(S).lost_by == {8}
        assert [s.lossy for s in store.list_sequences(2)] == [False, True]
    finally:
        store.close()
    assert user_version(path) == SCHEMA_VERSION


def test_a_version_7_file_gets_the_exception_its_roots_raised_when_upgraded(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    raised, fine = seq_id("e77"), seq_id("0c")
    events = [start(1, 100, raised), wire.Error(1, 200, "ValueError")]
    events += [start(2, 300, fine), wire.End(2, 400)]
    store = open_store(path, clock=clock)
    try:
        store.ingest(make_batch(7, 1, {1: events}), 1)
    finally:
        store.close()
    with sqlite3.connect(path) as conn:  # as version 7 wrote it
        _drop_listing_keys(conn)
        conn.execute("ALTER TABLE seq_roots DROP COLUMN error")
        conn.execute("PRAGMA user_version = 7")

    store = open_store(path, clock=clock)
    try:
        lines = {line.seq: line for line in store.list_sequences(10)}
    finally:
        store.close()

    assert user_version(path) == SCHEMA_VERSION
    assert (lines[raised].error, lines[fine].error) == ("ValueError", None)
    assert (lines[raised].invocations, lines[raised].status) == (1, "complete")


def _drop_listing_keys(conn: sqlite3.Connection) -> None:
    """Make a file's sequences as version 8 wrote them: without their listing keys (and its
    sampler reports without the paced interval of version 10)."""
    without_single_rows(conn)
    for index in ("sequences_by_root", "sequences_by_duration", "sequences_failed"):
        conn.execute(f"DROP INDEX {index}")
    for column in ("root_name", "end_ns", "error"):
        conn.execute(f"ALTER TABLE sequences DROP COLUMN {column}")
    _drop_sampler_intervals(conn)


def _drop_sampler_intervals(conn: sqlite3.Connection) -> None:
    """Make a file's sampler reports as version 9 wrote them: without the paced interval (and
    its methods index as version 10 kept it)."""
    for column in ("current_interval_ns", "longest_interval_ns"):
        conn.execute(f"ALTER TABLE samplers DROP COLUMN {column}")
    _split_batch_methods(conn)


def _split_batch_methods(conn: sqlite3.Connection) -> None:
    """Make a file's index as version 10 wrote it: the methods each sequence ran in a batch in a
    table of their own, ``seq_methods`` (and no sequence as a single row: version 13's)."""
    without_single_rows(conn)
    [create] = [s for s in PACKED_SCHEMA if s.startswith("CREATE TABLE seq_methods")]
    conn.execute(create)
    conn.execute(
        "INSERT INTO seq_methods SELECT seq, puid, batch_no, methods FROM batch_seqs "
        "WHERE methods IS NOT NULL"
    )
    conn.execute("ALTER TABLE batch_seqs DROP COLUMN methods")


def test_a_version_10_file_keeps_the_methods_its_sequences_ran_when_upgraded(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")

    def downgrade() -> None:
        with sqlite3.connect(path) as conn:  # as version 10 wrote it
            _split_batch_methods(conn)
            conn.execute("PRAGMA user_version = 10")
        conn.close()

    check_methods_kept_on_upgrade(lambda: open_store(path, clock=clock), make_batch, downgrade)
    assert user_version(path) == SCHEMA_VERSION
    with sqlite3.connect(path) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        index = conn.execute("SELECT seq, methods IS NULL FROM batch_seqs ORDER BY seq").fetchall()
    conn.close()
    assert "seq_methods" not in tables
    assert index == [(RAN, 0), (OTHER, 0), (HANDED, 1)]  # the hand-off's sequence ran nothing


def test_a_version_8_file_gets_its_listing_keys_when_upgraded_and_queries_find_its_sequences(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")

    def downgrade() -> None:
        with sqlite3.connect(path) as conn:
            _drop_listing_keys(conn)
            conn.execute("PRAGMA user_version = 8")
        conn.close()

    check_keys_computed_on_upgrade(lambda: open_store(path, clock=clock), make_batch, downgrade)
    assert user_version(path) == SCHEMA_VERSION


#: Sampler reports stored before a version added to them: (the version before, how a file is
#: made as it wrote them, what the upgrade must keep and read).
SAMPLER_UPGRADES = {
    "paced interval": (
        9,
        _drop_sampler_intervals,
        check_sampler_reports_kept_on_upgrade,
    ),
    "samples dropped": (13, without_sampler_drops, check_sampler_drops_kept_on_upgrade),
}


@pytest.mark.parametrize("added", list(SAMPLER_UPGRADES))
def test_an_older_file_keeps_its_sampler_reports_when_upgraded(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock, added: str
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    version, made_older, check = SAMPLER_UPGRADES[added]

    def downgrade() -> None:
        with sqlite3.connect(path) as conn:  # as that version wrote it
            made_older(conn)
            conn.execute(f"PRAGMA user_version = {version}")
        conn.close()

    check(lambda: open_store(path, clock=clock), make_batch, downgrade)
    assert user_version(path) == SCHEMA_VERSION


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_an_older_repository_is_not_read_before_it_is_upgraded(
    tmp_path: Path, version: int
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    older_schema(path, version)

    with pytest.raises(
        StoreError,
        match=rf"schema version {version}, older than .* \({SCHEMA_VERSION}\): run `cmr serve`",
    ):
        open_store(path, readonly=True)
    assert user_version(path) == version


@pytest.mark.parametrize("query", [SEQUENCE_BATCHES, METHODS_BY_RECENT_SEQUENCE])
def test_reading_a_sequence_looks_up_its_batches_by_index_and_never_scans_a_table(
    tmp_path: Path, query: str
) -> None:
    # `cmr show` and `cmr ls` read a sequence's batches: the cost must not grow with the
    # repository, only with the sequence.
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    params = {"since": 0} if query == METHODS_BY_RECENT_SEQUENCE else {"seq": S}
    with sqlite3.connect(path) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params)]
    conn.close()

    assert plan
    assert not [step for step in plan if step.startswith("SCAN")], plan


def test_a_sequences_batches_are_read_in_key_order_without_sorting_their_blobs(
    tmp_path: Path,
) -> None:
    # The batches come out of the primary keys in (puid, batch_no) order already; a sort of the
    # rows would copy every blob of a big sequence through a temporary b-tree (a file, once it
    # outgrows the cache): 49 MB written and read back for `cmr show` of a million calls.
    # A single row's arm (at most one row, one batch: found by the unique index on the id) may
    # be sorted; the side tables' arm, where a big sequence's batches are, may not.
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    with sqlite3.connect(path) as conn:
        plan = list(conn.execute(f"EXPLAIN QUERY PLAN {SEQUENCE_BATCHES}", {"seq": S}))
    conn.close()
    arms = {node for node, parent, _, _ in plan if parent == plan[0][0]}  # LEFT, RIGHT
    steps = {arm: " | ".join(d for _, parent, _, d in plan if parent == arm) for arm in arms}
    side_tables = [arm for arm in arms if "batch_seqs" in steps[arm]]
    single_row = [arm for arm in arms if "sequences_by_seq" in steps[arm]]

    assert side_tables, plan
    assert not [d for _, parent, _, d in plan if parent == 0 and "TEMP B-TREE" in d], plan
    assert "TEMP B-TREE" not in steps[side_tables[0]], plan
    assert all("TEMP B-TREE" not in steps[arm] for arm in arms - {*single_row}), plan


RECENT_SUMMARIES = SUMMARIES_OF_PICKED.format(
    picked=picked(NEWEST, None, Plan(None, few_durations=False), SQLITE)[0]
)


@pytest.mark.parametrize("query", [RECENT_SUMMARIES, THREAD_COUNTS, REMOTE_ENTRIES, OPEN_CALL])
def test_a_listing_line_is_read_by_index_whatever_the_size_of_its_sequence(
    tmp_path: Path, query: str
) -> None:
    # `cmr ls` must not grow with the sequences it lists: the only scan allowed is the walk down
    # the start-time index that LIMIT stops.
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    page = {
        "limit": 5,
        "start": 2**62,
        "seq": b"\xff" * 17,
        "since": 0,
        "until": 2**62,
        "host": "h",
    }
    params = (
        page
        if query == RECENT_SUMMARIES
        else {"puid": 1, "iid": 2, "seq": S}
        if query == OPEN_CALL
        else (S, 1, 2)[: query.count("?") or 3]
    )
    with sqlite3.connect(path) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params)]
    conn.close()

    # (b0, b1: the two arms of a page newest first, each read by index: decided and undecided)
    allowed = {"SCAN sequences USING INDEX sequences_by_start", "SCAN s", "SCAN CONSTANT ROW"}
    allowed |= {"SCAN b0", "SCAN b1"}
    assert plan
    assert not [step for step in plan if step.startswith("SCAN") and step not in allowed], plan


@pytest.mark.parametrize(("query", "index"), INDEXED_QUERIES)
def test_each_listing_query_is_served_by_its_index(
    tmp_path: Path, query: SequenceQuery, index: str
) -> None:
    # Every page a query reads searches an index (the start, the root name, the duration or
    # the errors), never the table; the field the query asks for has its own.
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    plans: list[list[str]] = []
    with sqlite3.connect(path) as conn:
        for sql, params in page_statements(query, SQLITE):
            plans.append([row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)])
    conn.close()

    reads = [step for plan in plans for step in plan if " sequences " in f"{step} "]
    assert reads
    assert all("USING INDEX" in step or "USING PRIMARY KEY" in step for step in reads), plans
    assert [step for plan in plans for step in plan if index in step], plans
    if query.status == "complete":  # the row's own end decides: no lookup per row
        assert not [step for plan in plans for step in plan if "open_calls" in step], plans


def test_a_version_6_repository_gets_the_listing_lines_its_batches_give(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    other = seq_id("07e")
    batches = [
        make_batch(7, 1, {1: [start(1, 100, S), start(2, 110, S, parent=1), wire.End(2, 120)]}),
        make_batch(7, 2, {2: [start(3, 130, other, hid=H), wire.End(1, 200)]}),
    ]
    store = open_store(path, clock=clock)
    try:
        for at, batch in enumerate(batches, start=1):
            store.ingest(batch, at)
        expected = store.list_sequences(10)
    finally:
        store.close()
    with sqlite3.connect(path) as conn:  # back to what version 6 wrote: no listing lines
        _drop_listing_keys(conn)
        for table in ("seq_roots", "seq_threads", "seq_entries", "open_calls"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("ALTER TABLE sequences DROP COLUMN invocations")
        conn.execute("PRAGMA user_version = 6")
    conn.close()

    store = open_store(path, clock=clock)
    try:
        assert store.list_sequences(10) == expected
        assert [(s.invocations, s.status) for s in expected] == [(1, "running"), (2, "complete")]
    finally:
        store.close()
    assert user_version(path) == SCHEMA_VERSION


def test_an_upgrade_moves_every_stored_call_and_late_end(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock, clock_offset_ns: int
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    older_schema(path, 5)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO starts VALUES (7, 2, ?, 1, 0, 2, 1, 150)", (S,))
        conn.execute("INSERT INTO ends VALUES (7, 2, 170, 'KeyError')")
        conn.execute("INSERT INTO ends VALUES (7, 3, 190, NULL)")  # its Start never arrived
    conn.close()

    store = open_store(path, clock=clock)
    try:
        # The End of iid 3 is kept: its Start may still come, from the same process.
        store.ingest(make_batch(7, 1, {1: [start(3, 180 - clock_offset_ns, S, parent=1)]}), 1)
        records = store.load_sequence(S).invocations
    finally:
        store.close()
    assert [(r.iid, r.parent, r.tid, r.start_ns, r.end_ns, r.error) for r in records] == [
        (1, 0, 1, 100, None, None),
        (2, 1, 2, 150, 170, "KeyError"),
        (3, 1, 1, 180, 190, None),
    ]
    with sqlite3.connect(path) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert not tables & {"starts", "ends"}


def test_a_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "other.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    conn.close()

    with pytest.raises(StoreError, match="is not an invoseq repository"):
        open_store(path)


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not SQLite\n" * 100)

    with pytest.raises(StoreError, match="is not an invoseq repository"):
        open_store(str(path))


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_an_unreachable_postgresql_server_fails_in_one_line_without_the_password(
    scheme: str,
) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(StoreError) as failure:
        open_store(f"{scheme}://invoseq:s3cret@127.0.0.1:{port}/invoseq")

    message = str(failure.value)
    assert message.startswith(f"cannot connect to postgresql://invoseq@127.0.0.1:{port}/invoseq")
    assert "\n" not in message
    assert "s3cret" not in message


def test_an_unknown_url_scheme_is_refused() -> None:
    with pytest.raises(StoreError, match="unsupported repository 'mysql://db': give a file path"):
        open_store("mysql://db")


def test_default_repository_is_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INVOSEQ_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_db_path() == "./.invoseq/cmr.sqlite"

    open_store().close()

    assert (tmp_path / ".invoseq" / "cmr.sqlite").is_file()


def test_invoseq_db_names_the_default_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "elsewhere.sqlite"
    monkeypatch.setenv("INVOSEQ_DB", str(path))
    assert default_db_path() == str(path)

    open_store().close()

"""SQLite makes a group's rows before its write transaction (``cmr.store.sqlite.writes.GroupPlan``):
a root's name comes from the batches' methods or an earlier lookup, not a lookup in the turn;
a name not known yet is looked up each time until it is; what a writer keeps is bounded; and a
group holding a batch stored before stores the rest as a group without it would."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmr.store import open_store
from cmr.store.accel import accelerator
from cmr.store.base import SequenceQuery
from cmr.store.single_rows import SingleRow
from cmr.store.sqlite import single
from cmr.store.sqlite.single import RootNames
from cmr.store.sqlite.store import SQLiteStore
from invoseq import wire
from tests.cmr.conftest import make_batch
from tests.cmr.store.records import repository_rows, seq_id, single_row_count, start
from tests.cmr.store.request_traffic import RequestTraffic, ingest

ms = 1_000_000


def request(puid: int, batch_no: int, seq: bytes, method: int, **options: object) -> wire.Batch:
    """A batch of one request: a root call of ``method`` and its End (a single row)."""
    iid = batch_no * 10
    events = [start(iid, batch_no * ms, seq, method=method), wire.End(iid, batch_no * ms + 5)]
    return make_batch(puid, batch_no, {1: events}, **options)  # type: ignore[arg-type]


def lookups_of_names(store: SQLiteStore, batch: wire.Batch) -> int:
    """How many statements read ``methods`` while ``store`` ingests ``batch``."""
    statements: list[str] = []
    conn = store._connection()
    conn.set_trace_callback(statements.append)
    try:
        assert store.ingest(batch, 1)
    finally:
        conn.set_trace_callback(None)
    return sum("FROM methods" in statement for statement in statements)


def roots(store: SQLiteStore, pattern: str) -> set[bytes]:
    lines = store.list_sequences(100, SequenceQuery(root=pattern))
    return {line.seq for line in lines}


def test_a_root_named_by_its_batches_or_before_needs_no_lookup_and_one_unknown_is_looked_up(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path / "cmr.sqlite"))
    assert isinstance(store, SQLiteStore)
    try:
        a, b, c, c2, d = (seq_id(f"{n}a") for n in range(1, 6))
        # Named by the batch that carries its method; then by what the writer keeps.
        assert lookups_of_names(store, request(7, 1, a, 1, methods={1: "app.handle"})) == 0
        assert lookups_of_names(store, request(7, 2, b, 1, methods={})) == 0
        # A method no batch described yet: looked up in the turn, and again next time.
        assert lookups_of_names(store, request(7, 3, c, 9, methods={})) == 1
        assert lookups_of_names(store, request(7, 4, c2, 9, methods={})) == 1
        assert lookups_of_names(store, request(7, 5, d, 9, methods={9: "app.late"})) == 0
        assert single_row_count(store.path) == 5
        assert roots(store, "app.handle") == {a, b}
        assert roots(store, "app.late") == {c, c2, d}  # c's are read once the method is known
    finally:
        store.close()


def test_a_name_another_writer_stored_is_looked_up_once(tmp_path: Path) -> None:
    path = str(tmp_path / "cmr.sqlite")
    first, second = open_store(path), open_store(path)
    assert isinstance(second, SQLiteStore)
    try:
        first.ingest(request(7, 1, seq_id("1a"), 1, methods={1: "app.handle"}), 1)
        assert lookups_of_names(second, request(7, 2, seq_id("2a"), 1, methods={})) == 1
        assert lookups_of_names(second, request(7, 3, seq_id("3a"), 1, methods={})) == 0
        assert roots(second, "app.handle") == {seq_id("1a"), seq_id("2a"), seq_id("3a")}
    finally:
        first.close()
        second.close()


def test_the_names_a_writer_keeps_are_bounded() -> None:
    names = RootNames()
    per_batch = wire.MAX_INFOS_PER_BATCH
    batches = [
        make_batch(puid, 1, {}, methods={m: f"app.m{m}" for m in range(1, per_batch + 1)})
        for puid in range(1, RootNames.LIMIT // per_batch + 3)
    ]
    names.learn(batches)
    assert len(names._names) <= RootNames.LIMIT


def test_a_group_with_a_batch_stored_before_stores_the_others_as_a_group_without_it(
    tmp_path: Path,
) -> None:
    batches = [request(7, n, seq_id(f"{n}b"), 1 + n % 2) for n in range(1, 5)]
    spread = seq_id("5b")  # on two threads: the side tables, its Starts counted
    batches[1] = make_batch(
        7,
        2,
        {
            1: [start(20, 2 * ms, spread), wire.End(20, 2 * ms + 9)],
            2: [start(21, 2 * ms + 1, spread, parent=20), wire.End(21, 2 * ms + 2)],
        },
    )
    paths = [str(tmp_path / f"{name}.sqlite") for name in ("again", "once")]
    again, once = (open_store(path) for path in paths)
    try:
        again.ingest_many(batches[:2], 1)
        assert again.ingest_many(batches, 2) == [False, False, True, True]
        once.ingest_many(batches[:2], 1)
        once.ingest_many(batches[2:], 2)
    finally:
        again.close()
        once.close()
    for table in ("sequences", "batch_seqs", "seq_roots", "seq_threads", "single_blocks"):
        query = f"SELECT * FROM {table} ORDER BY 1"
        assert repository_rows(paths[0], query) == repository_rows(paths[1], query), table
    assert single_row_count(paths[0]) == 3


def test_a_group_of_one_process_names_every_root_of_its_methods(tmp_path: Path) -> None:
    """The batches' rows replace each other in ``methods`` in write order: the writer keeps
    the later name, as the table does."""
    store = open_store(str(tmp_path / "cmr.sqlite"))
    try:
        store.ingest_many(
            [
                request(7, 1, seq_id("1c"), 1, methods={1: "app.old"}),
                request(7, 2, seq_id("2c"), 1, methods={1: "app.new"}),
            ],
            1,
        )
        store.ingest(request(7, 3, seq_id("3c"), 1, methods={}), 2)
        (stored,) = repository_rows(
            store.path, "SELECT module || '.' || qualname FROM methods WHERE method = 1"
        )
        named = repository_rows(
            store.path,
            "SELECT root_name FROM sequences WHERE seq = x'3c000000000000000000000000000000'",
        )
        assert named == [stored]
        assert named == [("app.new",)]
    finally:
        store.close()


def test_blocks_made_before_the_turn_describe_the_rows_as_read_back(tmp_path: Path) -> None:
    """A block's zones and batches come from the plan (``single._bound``), or are read back
    from its rows when some were skipped: either way, what the rows in its range say."""
    traffic = RequestTraffic(random.Random(54))
    path = str(tmp_path / "cmr.sqlite")
    store = open_store(path)
    try:
        ingest(store, [traffic.group(later=False) for _ in range(12)], True)
    finally:
        store.close()
    blocks = repository_rows(path, "SELECT * FROM single_blocks ORDER BY first_row")
    assert len(blocks) == 12
    for first_row, last_row, first_ns, last_ns, longest_ns in blocks:
        rows = f"FROM sequences WHERE rowid BETWEEN {first_row} AND {last_row}"
        zones = repository_rows(
            path,
            f"SELECT root_name, max(start_ns), max(end_ns - start_ns) {rows} "
            "AND root_name IS NOT NULL GROUP BY root_name ORDER BY 1",
        )
        assert zones == repository_rows(
            path,
            "SELECT root_name, last_ns, longest_ns FROM single_block_roots "
            f"WHERE first_row = {first_row} ORDER BY 1",
        )
        assert repository_rows(
            path, f"SELECT min(start_ns), max(start_ns), max(end_ns - start_ns) {rows}"
        ) == [(first_ns, last_ns, longest_ns)]
        assert repository_rows(
            path,
            f"SELECT DISTINCT one_puid, one_batch {rows} AND one_batch IS NOT NULL ORDER BY 1, 2",
        ) == repository_rows(
            path,
            "SELECT puid, batch_no FROM single_block_batches "
            f"WHERE first_row = {first_row} ORDER BY 1, 2",
        )


_I64 = st.integers(-(2**63), 2**63 - 1)
_ROOTS = st.tuples(st.integers(1, 3), st.integers(1, 4))


@st.composite
def single_rows(draw: st.DrawFn) -> tuple[list[SingleRow], dict[tuple[int, int], str | None]]:
    """A group's single rows (distinct ids, any 64-bit times: some durations overflow) and a
    name for each of their roots, some unknown (None); a third of the time one root unnamed."""
    count = draw(st.integers(0, 40))
    ids = draw(st.lists(st.binary(min_size=16, max_size=16), min_size=count, max_size=count))
    rows: list[SingleRow] = []
    for seq in dict.fromkeys(ids):
        puid, method = draw(_ROOTS)
        start_ns = draw(st.one_of(st.integers(0, 10**12), _I64))
        end_ns = draw(st.one_of(st.integers(start_ns, min(start_ns + 10**9, 2**63 - 1)), _I64))
        error = draw(st.one_of(st.none(), st.sampled_from(["ValueError", ""])))
        batch = draw(st.integers(1, 3))
        rows.append(
            (seq, start_ns, 2, puid, method, end_ns, error, puid, 7, 9, method, batch, b"\x91\x01")
        )
    roots = {(row[3], row[4]) for row in rows}
    names = {root: draw(st.sampled_from(["app.a", "app.b", None])) for root in roots}
    if roots and draw(st.integers(0, 2)) == 0:
        del names[min(roots)]
    return rows, names


@pytest.mark.skipif(accelerator is None, reason="the C accelerator is not built")
@settings(max_examples=200, deadline=None)
@given(group=single_rows())
def test_single_rows_are_bound_by_the_c_pass_as_by_python(
    group: tuple[list[SingleRow], dict[tuple[int, int], str | None]],
) -> None:
    """The parameters, zones and batches of a group's single rows are the same from the C pass
    (``bound_singles``) as from Python, a root not named is a KeyError from both, and a row whose
    duration exceeds 64 bits is left to Python (``_bound`` still answers)."""
    assert accelerator is not None
    rows, names = group
    fits = all(-(2**63) <= row[5] - row[1] < 2**63 for row in rows)
    try:
        expected = single._bound_in_python(rows, names)
    except KeyError:
        with pytest.raises(KeyError):
            single._bound(rows, names)
        if fits:
            with pytest.raises(KeyError):
                accelerator.bound_singles(rows, names)
        return
    assert single._bound(rows, names) == expected
    if fits:
        assert accelerator.bound_singles(rows, names) == expected
    else:
        with pytest.raises(OverflowError):
            accelerator.bound_singles(rows, names)

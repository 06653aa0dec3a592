"""Request-shaped sequences stored as single rows (``cmr.store.sqlite.single``) read the same as
when stored in the side tables: the same traffic ingested into two SQLite files, the layout on
and off, gives the same listing for every query, sort and filter, the same trees, prefix
lookups, searches, stats and prune; and the layout is really used for the request-shaped ones."""

from __future__ import annotations

import math
import random
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmr.store import open_store
from cmr.store.base import (
    KIND_REQUEST,
    KIND_SERVICE,
    LISTED_STATUSES,
    SORT_DURATION,
    SequenceQuery,
    Store,
    UnknownSequenceError,
)
from cmr.store.sqlite import single
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock, make_batch
from tests.cmr.store.records import start
from tests.cmr.store.strategies import processes as random_processes

Group = list[wire.Batch]
HOSTS = {1: "web-a", 2: "web-a", 3: "web-b"}


class _Traffic:
    """Groups of batches from three processes: requests of one and ten calls (some raising,
    some with attributes), sequences over two threads, over two batches, rooted at a remote
    parent, left open; then later groups that extend sequences stored before (a forged repeat,
    an entry from another process, an earlier true root, a hand-off), and drops."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.iid = dict.fromkeys(HOSTS, 1)
        self.clock = dict.fromkeys(HOSTS, 1_000)
        self.batch_no = dict.fromkeys(HOSTS, 0)
        self.seqs: list[bytes] = []
        self.starts: dict[bytes, tuple[int, wire.Start]] = {}  # seq -> (puid, its root Start)

    def _next(self, puid: int) -> tuple[int, int]:
        iid, t_ns = self.iid[puid], self.clock[puid]
        self.iid[puid] += 1
        self.clock[puid] += self.rng.randint(1, 40)
        return iid, t_ns

    def _seq(self) -> bytes:
        seq = self.rng.randbytes(16)
        self.seqs.append(seq)
        return seq

    def request(self, puid: int, calls: int) -> list[wire.Event]:
        seq = self._seq()
        root, t_ns = self._next(puid)
        first = start(root, t_ns, seq, method=self.rng.randint(1, 4))
        self.starts[seq] = (puid, first)
        events: list[wire.Event] = [first]
        for _ in range(calls - 1):
            child, t_child = self._next(puid)
            events += [start(child, t_child, seq, parent=root, method=5), wire.End(child, t_child)]
            if self.rng.random() < 0.2:
                events.append(wire.Attrs(child, {"user": self.rng.randint(1, 9)}))
        end_iid, end_ns = root, self._next(puid)[1]
        if self.rng.random() < 0.2:
            events.append(wire.Error(end_iid, end_ns, self.rng.choice(["ValueError", "KeyError"])))
        else:
            events.append(wire.End(end_iid, end_ns + self.rng.randint(0, 500)))
        return events

    def batch(self, puid: int, events: dict[int, list[wire.Event]], **extra: object) -> wire.Batch:
        self.batch_no[puid] += 1
        return make_batch(puid, self.batch_no[puid], events, host=HOSTS[puid], **extra)  # type: ignore[arg-type]

    def group(self, later: bool) -> Group:
        rng, batches = self.rng, []
        carried: list[tuple[int, int, int]] = []  # (puid, iid, tid) ended in the next batch
        for puid in HOSTS:
            for _ in range(rng.randint(1, 3)):
                main: list[wire.Event] = []
                other: list[wire.Event] = []
                for _ in range(rng.randint(3, 12)):
                    main += self.request(puid, rng.choice([1, 1, 10]))
                shape = rng.choice(["threads", "spanning", "remote", "open", "none"])
                seq = self._seq()
                root, t_ns = self._next(puid)
                if shape == "threads":
                    hid = rng.randint(1, 2**40)
                    child, t_child = self._next(puid)
                    main += [
                        start(root, t_ns, seq),
                        wire.Handoff(hid, root, "thread", 9, t_ns + 1, seq),
                        wire.End(root, t_child + 5),
                    ]
                    other += [
                        start(child, t_child, seq, parent=0, hid=hid),
                        wire.End(child, t_child + 3),
                    ]
                elif shape == "spanning":
                    main.append(start(root, t_ns, seq))
                    carried.append((puid, root, 1))
                elif shape == "remote":
                    main += [
                        start(root, t_ns, seq, hid=rng.randint(1, 2**40)),
                        wire.End(root, t_ns + 7),
                    ]
                elif shape == "open":
                    main.append(start(root, t_ns, seq))
                extra: dict[str, object] = {}
                if later and rng.random() < 0.5:
                    extra["lost_seqs"] = [rng.choice(self.seqs)]
                if later and rng.random() < 0.2:
                    extra["lost_windows"] = [(self.clock[puid] - 60, self.clock[puid] - 20)]
                batches.append(
                    self.batch(puid, {1: main, 2: other} if other else {1: main}, **extra)
                )
        for puid, iid, tid in carried:
            batches.append(self.batch(puid, {tid: [wire.End(iid, self._next(puid)[1])]}))
        if later:
            batches += self._extending()
        rng.shuffle(batches)
        return batches

    def _extending(self) -> list[wire.Batch]:
        """Batches that bring more of sequences stored before (single rows among them)."""
        rng, batches = self.rng, []
        for seq in rng.sample(sorted(self.starts), 6):
            puid, root = self.starts[seq]
            how = rng.choice(["repeat", "entry", "earlier", "handoff", "child"])
            other = 3 if puid != 3 else 1
            if how == "repeat":  # the same Start and End again, under a new batch number
                batches.append(self.batch(puid, {1: [root, wire.End(root.iid, root.t_ns + 3)]}))
            elif how == "entry":
                iid, t_ns = self._next(other)
                entry = start(iid, t_ns, seq, hid=rng.randint(1, 2**40), method=2)
                batches.append(self.batch(other, {4: [entry, wire.End(iid, t_ns + 9)]}))
            elif how == "earlier":
                iid = self._next(other)[0]
                early = start(iid, root.t_ns - 50, seq, method=3)
                batches.append(self.batch(other, {1: [early, wire.End(iid, root.t_ns + 2_000)]}))
            elif how == "handoff":
                hid = rng.randint(1, 2**40)
                batches.append(
                    self.batch(
                        puid, {1: [wire.Handoff(hid, root.iid, "thread", 9, root.t_ns + 1, seq)]}
                    )
                )
            else:  # a child on another thread of the same process, open
                iid, t_ns = self._next(puid)
                batches.append(self.batch(puid, {3: [start(iid, t_ns, seq, parent=root.iid)]}))
        return batches


@contextmanager
def _layout(on: bool) -> Iterator[None]:
    was = single.ENABLED
    single.ENABLED = on
    try:
        yield
    finally:
        single.ENABLED = was


def _ingest(store: Store, groups: list[Group], on: bool) -> None:
    with _layout(on):
        for at, group in enumerate(groups):
            store.ingest_many(group, CLOCK_OFFSET_NS + at)


def _single_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM sequences WHERE one_batch IS NOT NULL"
        ).fetchone()
    conn.close()
    return int(count)


def _queries(store: Store, seqs: list[bytes]) -> Iterator[SequenceQuery | None]:
    lines = store.list_sequences(10_000)
    starts = sorted(line.start_ns for line in lines)
    durations = sorted(line.end_ns - line.start_ns for line in lines if line.end_ns is not None)
    middle, quarter = starts[len(starts) // 2], starts[len(starts) // 4]
    short, long = durations[len(durations) // 4], durations[3 * len(durations) // 4]
    yield None
    for root in ("app.m1", "app.m*", "*m2", "app.m9", "nothing"):
        yield SequenceQuery(root=root)
        yield SequenceQuery(root=root, sort=SORT_DURATION)
    for status in LISTED_STATUSES:
        yield SequenceQuery(status=status)
        yield SequenceQuery(status=status, sort=SORT_DURATION, host="web-b")
    yield SequenceQuery(min_duration_ns=short)
    yield SequenceQuery(max_duration_ns=long, sort=SORT_DURATION)
    yield SequenceQuery(min_duration_ns=short, max_duration_ns=long, root="app.m3")
    yield SequenceQuery(since_ns=quarter, until_ns=middle)
    yield SequenceQuery(since_ns=middle, host="web-a", sort=SORT_DURATION)
    yield SequenceQuery(host="web-b")
    yield SequenceQuery(host="elsewhere")
    yield SequenceQuery(kind=KIND_REQUEST)
    yield SequenceQuery(kind=KIND_SERVICE, sort=SORT_DURATION)
    yield SequenceQuery(kind=KIND_REQUEST, status="error", since_ns=quarter)


def _answers(store: Store, seqs: list[bytes], queries: list[SequenceQuery | None]) -> list[object]:
    """Everything a user reads of the repository, in one list."""
    found: list[object] = []
    for query in queries:
        for limit in (1, 7, 10_000):
            found.append((query, limit, store.list_sequences(limit, query)))
    for seq in seqs:
        try:
            found.append(store.load_sequence(seq))
        except UnknownSequenceError as exc:
            found.append(str(exc))
        for prefix in (seq.hex()[:3], seq.hex()[:8]):
            try:
                found.append(store.resolve_sequence(prefix))
            except Exception as exc:  # an ambiguous or unknown prefix: its message
                found.append(str(exc))
    found.append(store.neighbours(seqs[::7]))
    for method in ("app.m1", "app.m3", "app.m5", "app.m9"):
        for limit in (1, 5, 1_000):
            found.append(store.find_sequences(method, since_ns=None, limit=limit))
    stats = store.stats()
    found.append((stats.batches, stats.events, stats.duplicate_batches, stats.processes))
    return found


def test_request_traffic_reads_the_same_stored_as_single_rows_or_in_the_side_tables(
    tmp_path: Path,
) -> None:
    traffic = _Traffic(random.Random(33))
    groups = [traffic.group(later=at > 0) for at in range(5)]
    clock = FakeClock()
    stores = {}
    for on in (False, True):
        path = tmp_path / f"{on}.sqlite"
        stores[on] = open_store(str(path), clock=clock)
        _ingest(stores[on], groups, on)
    try:
        assert _single_rows(tmp_path / "False.sqlite") == 0
        assert _single_rows(tmp_path / "True.sqlite") > len(traffic.seqs) // 2
        seqs = sorted(traffic.seqs)
        queries = list(_queries(stores[False], seqs))
        assert _answers(stores[True], seqs, queries) == _answers(stores[False], seqs, queries)
        lines = stores[False].list_sequences(10_000)
        cutoff = sorted(line.start_ns for line in lines)[len(lines) // 2]
        assert stores[True].prune(cutoff) == stores[False].prune(cutoff)
        assert _answers(stores[True], seqs, queries) == _answers(stores[False], seqs, queries)
        assert stores[True].prune(cutoff + 10**9) == stores[False].prune(cutoff + 10**9)
        assert _answers(stores[True], seqs, queries[:1]) == _answers(
            stores[False], seqs, queries[:1]
        )
    finally:
        for store in stores.values():
            store.close()
    for on in (False, True):  # what prune left: the same batches and processes
        with sqlite3.connect(tmp_path / f"{on}.sqlite") as conn:
            kept = conn.execute("SELECT puid, batch_no FROM batches ORDER BY 1, 2").fetchall()
            stores[on] = kept  # type: ignore[assignment]
        conn.close()
    assert stores[True] == stores[False]


def test_a_single_row_sequence_extended_later_moves_to_the_side_tables(tmp_path: Path) -> None:
    """A request stored as one row, then a later batch with another thread's call of it: the
    row gives way to the side tables, and the listing counts both threads and calls."""
    seq = bytes(range(16))
    store = open_store(str(tmp_path / "cmr.sqlite"), clock=FakeClock())
    try:
        store.ingest(make_batch(7, 1, {1: [start(1, 100, seq), wire.End(1, 200)]}), 1)
        assert _single_rows(tmp_path / "cmr.sqlite") == 1
        [line] = store.list_sequences(5)
        assert (line.invocations, line.threads, line.status) == (1, 1, "complete")
        store.ingest(make_batch(7, 2, {2: [start(2, 150, seq, parent=1), wire.End(2, 160)]}), 2)
        assert _single_rows(tmp_path / "cmr.sqlite") == 0
        [line] = store.list_sequences(5)
        assert (line.invocations, line.threads, line.status) == (2, 2, "complete")
        assert [r.iid for r in store.load_sequence(seq).invocations] == [1, 2]
    finally:
        store.close()


def test_a_request_whose_child_started_before_its_root_keeps_its_root_s_own_start(
    tmp_path: Path,
) -> None:
    """A child that started before its root (a forged batch: its chunks out of order): the
    root's start is not the sequence's, so the request takes the side tables, where a true root
    brought later that started between the two wins, as it does in the side tables."""
    seq = bytes(range(16))
    first = make_batch(7, 1, {1: [start(2, 100, seq, parent=1), wire.End(2, 110)]})
    first = msgspec.structs.replace(
        first,
        chunks=[*first.chunks, wire.ThreadChunk(1, [start(1, 300, seq), wire.End(1, 400)])],
    )
    later = make_batch(8, 1, {1: [start(1, 200, seq, method=3), wire.End(1, 250)]})
    roots = {}
    for on in (False, True):
        store = open_store(str(tmp_path / f"{on}.sqlite"), clock=FakeClock())
        try:
            _ingest(store, [[first], [later]], on)
            [line] = store.list_sequences(5)
            roots[on] = (line.root, line.start_ns, line.end_ns)
        finally:
            store.close()
    assert roots[True] == roots[False]
    assert roots[True][0] == "app.m3"


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(groups=st.lists(random_processes, min_size=1, max_size=3), cut=st.integers(-6, 6))
def test_random_batches_read_the_same_either_way(
    tmp_path_factory: pytest.TempPathFactory,
    groups: list[dict[int, list[list[wire.ThreadChunk]]]],
    cut: int,
) -> None:
    """Batches whose ids and times collide (repeated Starts, Ends first, equal times, Handoffs,
    Errors, Attrs), a group commit each: the same answers either way, and after a prune."""
    folder = tmp_path_factory.mktemp("random")
    batch_groups: list[Group] = []
    numbers: dict[int, int] = {}
    for group in groups:
        batch_groups.append([])
        for puid, batches in group.items():
            for chunks in batches:
                numbers[puid] = numbers.get(puid, 0) + 1
                batch = make_batch(puid, numbers[puid], {}, methods=_METHODS)
                batch_groups[-1].append(_with_chunks(batch, chunks))
    seqs = sorted(_seqs(batch_groups))
    queries: list[SequenceQuery | None] = [
        None,
        SequenceQuery(sort=SORT_DURATION),
        SequenceQuery(status="complete"),
        SequenceQuery(status="running", sort=SORT_DURATION),
        SequenceQuery(root="app.m1"),
        SequenceQuery(min_duration_ns=0, host="testhost"),
    ]
    answers = []
    for on in (False, True):
        store = open_store(str(folder / f"{on}.sqlite"), clock=FakeClock())
        try:
            _ingest(store, batch_groups, on)
            found = _answers(store, seqs, queries) if seqs else []
            found.append(store.prune(CLOCK_OFFSET_NS + cut))
            found += _answers(store, seqs, queries[:1]) if seqs else []
            answers.append(found)
        finally:
            store.close()
    assert answers[0] == answers[1]


_METHODS = {method: f"app.m{method}" for method in (1, 2, 3, 9)}


def _with_chunks(batch: wire.Batch, chunks: list[wire.ThreadChunk]) -> wire.Batch:
    """``batch`` with ``chunks``, but an infinite attribute value: stored as JSON it is read
    back as null, which neither layout's tree can read (a fault of its own, outside this
    comparison)."""
    chunks = [
        wire.ThreadChunk(chunk.tid, [e for e in chunk.events if not _infinite(e)])
        for chunk in chunks
    ]
    tids = sorted({chunk.tid for chunk in chunks})
    threads = [wire.ThreadInfo(tid, 1000 + tid, f"thread-{tid}") for tid in tids]
    return msgspec.structs.replace(batch, chunks=chunks, threads=threads)


def _infinite(event: wire.Event) -> bool:
    return isinstance(event, wire.Attrs) and any(
        isinstance(v, float) and not math.isfinite(v) for v in event.attributes.values()
    )


def _seqs(groups: list[Group]) -> set[bytes]:
    return {
        event.seq
        for group in groups
        for batch in group
        for chunk in batch.chunks
        for event in chunk.events
        if isinstance(event, wire.Start | wire.Handoff)
    }

"""Request-shaped traffic with the shapes around it, and everything a user reads of a repository,
for comparing its layouts (tests/cmr/store/test_single_rows.py, test_single_rows_served.py,
test_appended_sequences.py)."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cmr.store import StoreError, open_store, single_rows
from cmr.store.base import (
    KIND_REQUEST,
    KIND_SERVICE,
    LISTED_STATUSES,
    SORT_DURATION,
    SequenceQuery,
    Store,
    UnknownSequenceError,
)
from cmr.store.block_pages import Picked
from cmr.store.sqlite.schema import SCHEMA_VERSION
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock, make_batch
from tests.cmr.store.records import repository_rows, single_row_count, start, user_version

Group = list[wire.Batch]
HOSTS = {1: "web-a", 2: "web-a", 3: "web-b"}


class RequestTraffic:
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
def layout(on: bool) -> Iterator[None]:
    """Single rows on or off (``single_rows.ENABLED``) for the block."""
    was = single_rows.ENABLED
    single_rows.ENABLED = on
    try:
        yield
    finally:
        single_rows.ENABLED = was


def ingest(store: Store, groups: list[Group], on: bool, first: int = 0) -> None:
    """Each of ``groups`` a group commit, received in turn from ``first`` (ns after the clock
    offset), the layout ``on`` or off."""
    with layout(on):
        for at, group in enumerate(groups, first):
            store.ingest_many(group, CLOCK_OFFSET_NS + at)


def blocks_read_as_side_tables(urls: dict[bool, str], check_blocks: Callable[[], None]) -> None:
    """Thirty groups of request traffic stored with single rows off (the side tables: the
    reference) and on, in repositories ``urls[False]`` and ``urls[True]``: every answer of
    ``answers`` and three more queries, searches since a time, then a prune, give the same in
    both, and prune keeps the same batches; ``check_blocks`` looks at the blocks written, after
    the groups and after the prune."""
    traffic = RequestTraffic(random.Random(16))
    groups = [traffic.group(later=at > 0) for at in range(30)]
    stores = {on: open_store(url, clock=FakeClock()) for on, url in urls.items()}
    try:
        for on, store in stores.items():
            ingest(store, groups, on)
        check_blocks()
        seqs = sorted(traffic.seqs)
        queries = list(listing_queries(stores[False], seqs))
        queries += [
            SequenceQuery(root="app.m2", min_duration_ns=1_000),
            SequenceQuery(root="app.m[13]", sort=SORT_DURATION),
            SequenceQuery(min_duration_ns=2_000, sort=SORT_DURATION, status="error"),
        ]
        assert answers(stores[True], seqs, queries) == answers(stores[False], seqs, queries)
        lines = stores[False].list_sequences(10_000)
        middle = sorted(line.start_ns for line in lines)[len(lines) // 2]
        assert [
            store.find_sequences("app.m2", since_ns=middle, limit=limit)
            for store in stores.values()
            for limit in (3, 1_000)
        ] == [
            stores[False].find_sequences("app.m2", since_ns=middle, limit=limit)
            for limit in (3, 1_000)
        ] * 2
        assert stores[True].prune(middle) == stores[False].prune(middle)
        assert answers(stores[True], seqs, queries) == answers(stores[False], seqs, queries)
        kept = "SELECT puid, batch_no FROM batches ORDER BY 1, 2"  # what prune left
        assert repository_rows(urls[True], kept) == repository_rows(urls[False], kept)
        check_blocks()
    finally:
        for store in stores.values():
            store.close()


#: The batches of ``rare_root_reads_its_blocks``' traffic whose first request has the rare root.
RARE_ROOT_IN = frozenset({3, 11})
#: The single rows a page picks by blocks in repository ``url`` for a query, at most a size,
#: and how many blocks it read.
PickedByBlocks = Callable[[str, SequenceQuery, int], tuple[list[Picked], int]]


def rare_root_reads_its_blocks(url: str, picked_by_blocks: PickedByBlocks) -> None:
    """20 batches of 50 one-call requests, each its own group, the root method 7 (``app.m7``) in
    two of them (``RARE_ROOT_IN``), methods 1 to 3 in the rest, stored in repository ``url``: a
    page for the rare root reads the two blocks holding it and no other, and a common root fills
    the page from the latest blocks and reads no more."""
    store = open_store(url, clock=FakeClock())
    try:
        for group in range(20):
            events: list[wire.Event] = []
            for at in range(50):
                iid, t_ns = group * 100 + at + 1, (group * 100 + at) * 1_000
                method = 7 if group in RARE_ROOT_IN and at == 0 else 1 + at % 3
                events += [start(iid, t_ns, random.randbytes(16), method=method)]
                events.append(wire.End(iid, t_ns + 500))
            store.ingest_many([make_batch(1, group + 1, {1: events})], CLOCK_OFFSET_NS + group)
    finally:
        store.close()
    assert single_row_count(url) == 1_000
    rare, rare_reads = picked_by_blocks(url, SequenceQuery(root="app.m7"), 20)
    assert len(rare) == len(RARE_ROOT_IN)
    assert rare_reads == len(RARE_ROOT_IN)
    common, common_reads = picked_by_blocks(url, SequenceQuery(root="app.m1"), 20)
    assert len(common) == 20
    assert common_reads <= 2


def listing_queries(store: Store, seqs: list[bytes]) -> Iterator[SequenceQuery | None]:
    """Listing queries of every kind, their bounds drawn from what ``store`` lists."""
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


def answers(store: Store, seqs: list[bytes], queries: list[SequenceQuery | None]) -> list[object]:
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


def stored_as_older(
    path: Path, groups: list[Group], made_older: Callable[[sqlite3.Connection], None], version: int
) -> None:
    """``groups`` stored in a new file ``path``, then made as schema ``version`` wrote it."""
    old = open_store(str(path), clock=FakeClock())
    try:
        ingest(old, groups, True)
    finally:
        old.close()
    with sqlite3.connect(path) as conn:
        made_older(conn)
        conn.execute(f"PRAGMA user_version = {version}")
    conn.close()


def upgraded_reads_the_same(
    path: Path,
    traffic: RequestTraffic,
    groups: list[Group],
    *,
    version: int,
    reference_layout: bool,
    when_upgraded: Callable[[], None],
) -> None:
    """File ``path``, of schema ``version`` and holding ``groups[:2]``, is not read before it is
    upgraded; once opened for writing it is (``when_upgraded`` checks it then), stores the rest
    of ``groups`` with single rows, and answers as a new file given all of them does (its
    single-row layout ``reference_layout``)."""
    with pytest.raises(StoreError, match=rf"schema version {version}, older than .* upgrade it"):
        open_store(str(path), readonly=True)
    clock = FakeClock()
    upgraded = open_store(str(path), clock=clock)
    reference = open_store(str(path.with_name("reference.sqlite")), clock=clock)
    try:
        assert user_version(path) == SCHEMA_VERSION > version
        when_upgraded()
        ingest(reference, groups, reference_layout)
        ingest(upgraded, groups[2:], True, first=2)
        assert single_row_count(str(path)) > 0
        seqs = sorted(traffic.seqs)
        queries = list(listing_queries(reference, seqs))
        assert answers(upgraded, seqs, queries) == answers(reference, seqs, queries)
    finally:
        upgraded.close()
        reference.close()

"""The PostgreSQL store's day partitions and retention: prune drops whole old day partitions and
deletes only the rest, and times far from the repository's clock do not make a partition each.
Runs against the server INVOSEQ_TEST_PG names (see conftest.py), each test in its own schema."""

from __future__ import annotations

import pytest

from cmr.store import open_store
from cmr.store.postgres.connect import connect
from cmr.store.postgres.partitions import DAY_NS, FUTURE, PAST_DAYS, partition_name
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock
from tests.cmr.store.postgres_support import TODAY
from tests.cmr.store.postgres_support import tables as _tables
from tests.cmr.store.records import BatchFactory, handoff, seq_id, start

pytestmark = pytest.mark.postgres


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

"""Retention (``Store.prune``), the same on every backend: whole old sequences go, recent ones stay
exactly as they were, and nothing is left that names what went."""

from __future__ import annotations

import pytest

from cmr.store import Store, UnknownSequenceError
from invoseq import wire
from tests.cmr.store.records import BatchFactory, handoff, seq_id, start

OLD = seq_id("01d")
NEW = seq_id("0e1")
HID = 0x77


def _sample(tid: int, t_ns: int) -> wire.Sample:
    return wire.Sample(
        tid=tid, t_ns=t_ns, weight=1, duration_ns=10, cpu_ns=0, frames=[1], lines=[3]
    )


def test_prune_removes_old_sequences_whole_and_keeps_recent_ones_as_they_were(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    frame = wire.FrameInfo(1, "/src/app.py", "work", 1)
    # Process 1 ran OLD (with a hand-off, a late End and a lossy mark) and then nothing.
    store.ingest(
        make_batch(
            1,
            1,
            {1: [start(1, 100, OLD), handoff(HID, 1, 110, OLD)], 2: [start(2, 120, OLD, hid=HID)]},
            frames=[frame],
            samples=[_sample(1, 105)],
            lost_seqs=[OLD],
        ),
        received_ns=clock_offset_ns + 200,
    )
    store.ingest(
        make_batch(1, 2, {1: [wire.End(1, 300)], 2: [wire.End(2, 250)]}),
        received_ns=clock_offset_ns + 400,
    )
    # Process 2 runs NEW, later.
    store.ingest(
        make_batch(
            2, 1, {1: [start(1, 5_000, NEW), wire.End(1, 6_000)]}, samples=[_sample(1, 5_100)]
        ),
        received_ns=clock_offset_ns + 7_000,
    )
    before = store.load_sequence(NEW)
    stats_before = store.stats()

    result = store.prune(clock_offset_ns + 1_000)

    assert (result.sequences, result.samples, result.processes) == (1, 1, 1)
    with pytest.raises(UnknownSequenceError):
        store.load_sequence(OLD)
    assert [s.seq for s in store.list_sequences(10)] == [NEW]
    assert store.load_sequence(NEW) == before
    assert store.find_sequences("app.m1", since_ns=None, limit=10) == [NEW]
    stats = store.stats()
    assert [p.puid for p in stats.processes] == [2]
    # Counters are totals ever received.
    assert (stats.batches, stats.events, stats.samples) == (
        stats_before.batches,
        stats_before.events,
        stats_before.samples,
    )


def test_prune_keeps_a_sequence_that_started_at_the_cutoff_and_its_process(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    store.ingest(make_batch(1, 1, {1: [start(1, 1_000, NEW)]}), received_ns=clock_offset_ns + 1)

    result = store.prune(clock_offset_ns + 1_000)

    assert (result.sequences, result.processes) == (0, 0)
    assert store.list_sequences(1)[0].status == "running"
    # Its End may still come, and still closes it.
    store.ingest(make_batch(1, 2, {1: [wire.End(1, 2_000)]}), received_ns=clock_offset_ns + 2)
    assert store.list_sequences(1)[0].status == "complete"


def test_a_process_still_named_by_a_recent_sequence_is_kept(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    # Process 1 reported dropping events of NEW, long ago; NEW itself came from process 2.
    store.ingest(make_batch(1, 1, {1: []}, lost_seqs=[NEW]), received_ns=clock_offset_ns)
    store.ingest(make_batch(2, 1, {1: [start(1, 5_000, NEW)]}), received_ns=clock_offset_ns + 6_000)

    store.prune(clock_offset_ns + 1_000)

    data = store.load_sequence(NEW)
    assert data.lost_by == {1}
    assert set(data.processes) == {1, 2}
    assert store.list_sequences(1)[0].lossy


def test_pruning_an_empty_repository_removes_nothing(store: Store) -> None:
    result = store.prune(2**62)
    assert (result.sequences, result.samples, result.processes) == (0, 0, 0)


def test_prune_tells_how_far_it_has_gone(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    """``on_step(done, total)``: each statement of a database's prune, in order, to the total
    (``cmr prune``'s progress); the memory store's prune is quick and says nothing."""
    store.ingest(
        make_batch(1, 1, {1: [start(1, 100, OLD), wire.End(1, 300)]}),
        received_ns=clock_offset_ns + 400,
    )
    steps: list[tuple[int, int]] = []

    result = store.prune(clock_offset_ns + 1_000, on_step=lambda *step: steps.append(step))

    assert result.sequences == 1
    if type(store).__name__.startswith("Memory"):
        assert steps == []
        return
    total = steps[0][1]
    assert steps == [(done, total) for done in range(1, total + 1)]
    assert total > 5

"""The contract for lossy sequences, run against each backend: a sequence some process reported
(``Batch.lost_seqs``) dropping events of is lossy for good, whatever order batches arrive in, and
the store says which processes dropped them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cmr.store import Store, UnknownSequenceError
from invoseq import wire
from tests.cmr.store.records import seq_id, start

BatchFactory = Callable[..., wire.Batch]
LOSSY = seq_id("10")
WHOLE = seq_id("20")


def calls(seq: bytes, first_iid: int) -> list[wire.Event]:
    return [start(first_iid, 100, seq), wire.End(first_iid, 200)]


def lossy_listing(store: Store) -> dict[bytes, bool]:
    return {summary.seq: summary.lossy for summary in store.list_sequences(10)}


def test_a_reported_sequence_is_lossy_and_names_who_dropped_its_events(
    store: Store, make_batch: BatchFactory
) -> None:
    events = {1: calls(LOSSY, 1) + calls(WHOLE, 2)}
    store.ingest(make_batch(7, 1, events, dropped=40, lost_seqs=[LOSSY]), 1)

    assert lossy_listing(store) == {LOSSY: True, WHOLE: False}
    assert store.load_sequence(LOSSY).lost_by == {7}
    assert store.load_sequence(WHOLE).lost_by == frozenset()


def test_a_report_arriving_before_the_sequence_marks_it_once_it_arrives(
    store: Store, make_batch: BatchFactory
) -> None:
    # Process 8 dropped every event it had of the sequence; process 7's arrive later.
    store.ingest(make_batch(8, 1, {}, host="worker", pid=88, lost_seqs=[LOSSY]), 1)
    assert store.list_sequences(10) == []  # nothing to show yet: no event of it arrived

    store.ingest(make_batch(7, 1, {1: calls(LOSSY, 1)}), 2)

    assert lossy_listing(store) == {LOSSY: True}
    data = store.load_sequence(LOSSY)
    assert data.lost_by == {8}
    assert (data.processes[8].host, data.processes[8].pid) == ("worker", 88)  # to name it


def test_a_sequence_stays_lossy_and_collects_every_reporting_process(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 2, {1: calls(LOSSY, 1)}, lost_seqs=[LOSSY, LOSSY]), 1)
    store.ingest(make_batch(7, 1, {1: calls(WHOLE, 2)}), 2)  # later, without a report
    store.ingest(make_batch(7, 3, {}, lost_seqs=[LOSSY]), 3)  # reported again
    store.ingest(make_batch(9, 1, {}, lost_seqs=[LOSSY]), 4)

    assert lossy_listing(store) == {LOSSY: True, WHOLE: False}
    assert store.load_sequence(LOSSY).lost_by == {7, 9}


def test_a_duplicate_batch_changes_nothing(store: Store, make_batch: BatchFactory) -> None:
    store.ingest(make_batch(7, 1, {1: calls(LOSSY, 1)}), 1)

    assert not store.ingest(make_batch(7, 1, {}, lost_seqs=[LOSSY]), 2)  # same (puid, batch_no)

    assert lossy_listing(store) == {LOSSY: False}


def test_a_sequence_only_reported_lost_is_not_a_sequence_to_show(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 1, {}, lost_seqs=[LOSSY]), 1)

    with pytest.raises(UnknownSequenceError):
        store.resolve_sequence(LOSSY.hex())
    with pytest.raises(UnknownSequenceError):
        store.load_sequence(LOSSY)

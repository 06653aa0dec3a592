"""The contract for windows of unnamed drops, run against each backend: a process that dropped
events of sequences it could not name reports when (``Batch.lost_windows``), and every sequence
of that process that overlaps such a window (from its earliest Start to its root's end, or on
while open) is lossy, whatever order batches arrive in; the others are not."""

from __future__ import annotations

from collections.abc import Callable

from cmr.store import Store
from invoseq import wire
from tests.cmr.store.records import seq_id, start

BatchFactory = Callable[..., wire.Batch]
BEFORE = seq_id("10")  # 100..200: ended before the window
DURING = seq_id("20")  # 300..400: inside it
ACROSS = seq_id("30")  # 450..700: begun in it, ended after it
AFTER = seq_id("40")  # 800..900: begun after it
OPEN = seq_id("50")  # from 250, never ended
ELSEWHERE = seq_id("60")  # 300..400 on another process
WINDOW = (250, 500)


def call(seq: bytes, iid: int, start_ns: int, end_ns: int | None) -> list[wire.Event]:
    ended = [] if end_ns is None else [wire.End(iid, end_ns)]
    return [start(iid, start_ns, seq), *ended]


def events() -> dict[int, list[wire.Event]]:
    return {
        1: call(BEFORE, 1, 100, 200) + call(DURING, 2, 300, 400) + call(ACROSS, 3, 450, 700),
        2: call(AFTER, 4, 800, 900) + call(OPEN, 5, 250, None),
    }


def lossy_listing(store: Store) -> dict[bytes, bool]:
    return {summary.seq: summary.lossy for summary in store.list_sequences(10)}


EXPECTED = {
    BEFORE: False,
    DURING: True,
    ACROSS: True,
    AFTER: False,
    OPEN: True,
    ELSEWHERE: False,
}


def test_the_sequences_of_the_process_that_overlap_its_window_are_lossy(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    store.ingest(make_batch(7, 1, events(), lost_windows=[WINDOW]), 1)
    store.ingest(make_batch(8, 1, {1: call(ELSEWHERE, 1, 300, 400)}), 2)

    assert lossy_listing(store) == EXPECTED
    data = store.load_sequence(DURING)
    assert data.lost_by == {7}
    assert data.lost_windows == {7: (250 + clock_offset_ns, 500 + clock_offset_ns)}  # wall clock
    assert store.load_sequence(AFTER).lost_by == frozenset()
    assert store.load_sequence(ELSEWHERE).lost_windows == {}


def test_a_window_arriving_before_the_sequences_marks_them_once_they_arrive(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 2, {}, lost_windows=[WINDOW]), 1)  # a heartbeat, say
    store.ingest(make_batch(8, 1, {1: call(ELSEWHERE, 1, 300, 400)}), 2)
    store.ingest(make_batch(7, 1, events()), 3)

    assert lossy_listing(store) == EXPECTED
    assert store.load_sequence(OPEN).lost_by == {7}


def test_windows_add_up_and_a_named_sequence_keeps_its_mark(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 1, events(), lost_seqs=[BEFORE], lost_windows=[(850, 860)]), 1)
    store.ingest(make_batch(7, 2, {}, lost_windows=[(850, 860), (390, 395)]), 2)  # again, and one

    listing = lossy_listing(store)
    assert listing == {BEFORE: True, DURING: True, ACROSS: False, AFTER: True, OPEN: True}
    assert store.load_sequence(BEFORE).lost_windows == {}  # named, not by a window
    assert set(store.load_sequence(OPEN).lost_windows) == {7}


def test_pruning_a_process_forgets_its_windows(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    store.ingest(make_batch(7, 1, {1: call(DURING, 2, 300, 400)}, lost_windows=[WINDOW]), 1)
    store.prune(2**62)  # everything is older

    store.ingest(make_batch(7, 2, {1: call(AFTER, 4, 300, 400)}), 2**62 + 1)

    assert lossy_listing(store) == {AFTER: False}

"""The contract for listing lines kept at ingest (``cmr.store.summaries``), run against each
backend: whatever order a sequence's events arrive in, its line in ``list_sequences`` is the line
its own records give (``rules.summarize`` of ``load_sequence``), as of every batch, and listing
reads nothing per invocation."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from cmr.store import Store
from cmr.store.base import REMOTE_PARENT, SequenceSummary
from cmr.store.rules import summarize
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import handoff, seq_id, start

BatchFactory = Callable[..., wire.Batch]
A, B, C, D = seq_id("a1"), seq_id("b2"), seq_id("c3"), seq_id("d4")
FOREIGN_HID = 0x70F0_0000_0000_0001
LOCAL_HID = 0x10CA_0000_0000_0001


def listing(store: Store) -> dict[bytes, SequenceSummary]:
    return {s.seq: s for s in store.list_sequences(100)}


def from_records(store: Store, summary: SequenceSummary) -> SequenceSummary:
    return summarize(store.load_sequence(summary.seq, samples=False), summary.start_ns)


def agrees(store: Store) -> dict[bytes, SequenceSummary]:
    """Every listed line equals the one the sequence's records give; the lines, by sequence."""
    lines = listing(store)
    for line in lines.values():
        assert line == from_records(store, line)
    return lines


def ingest_each(store: Store, batches: Iterable[wire.Batch]) -> list[dict[bytes, SequenceSummary]]:
    """Ingest one by one, checking the listing after each; the listings."""
    seen = []
    for at, batch in enumerate(batches, start=1):
        assert store.ingest(batch, at)
        seen.append(agrees(store))
    return seen


def test_a_tree_over_batches_is_counted_and_completes_when_its_late_root_end_arrives(
    store: Store, make_batch: BatchFactory
) -> None:
    first = {1: [start(1, 100, A), start(2, 110, A, parent=1), wire.End(2, 120)]}
    second = {2: [start(3, 130, A, parent=1), wire.Error(3, 140, "KeyError")]}
    third = {1: [wire.End(1, 200)]}
    lines = ingest_each(
        store, [make_batch(7, n, ev) for n, ev in enumerate([first, second, third], 1)]
    )

    assert [(s[A].invocations, s[A].threads, s[A].status) for s in lines] == [
        (2, 1, "running"),
        (3, 2, "running"),
        (3, 2, "complete"),
    ]
    assert (lines[-1][A].root, lines[-1][A].end_ns) == ("app.m1", lines[-1][A].start_ns + 100)


@pytest.mark.parametrize("order", ["start first", "error first"])
def test_the_exception_the_root_raised_is_on_its_line_in_any_order(
    store: Store, make_batch: BatchFactory, order: str
) -> None:
    begun = {1: [start(1, 100, A), start(2, 110, A, parent=1), wire.Error(2, 120, "KeyError")]}
    raised = {1: [wire.Error(1, 200, "TimeoutError")]}
    fine = {1: [start(3, 300, B), wire.End(3, 400)]}
    batches = [begun, raised, fine] if order == "start first" else [raised, begun, fine]

    lines = ingest_each(store, [make_batch(7, n, ev) for n, ev in enumerate(batches, 1)])

    assert (lines[-1][A].error, lines[-1][A].status) == ("TimeoutError", "complete")
    assert lines[-1][B].error is None  # a callee's exception is not the root's


def test_an_end_that_arrives_before_its_start_closes_it(
    store: Store, make_batch: BatchFactory
) -> None:
    batches = [
        make_batch(7, 1, {1: [start(1, 100, A), wire.End(2, 150)]}),
        make_batch(7, 2, {1: [start(2, 120, A, parent=1), wire.End(1, 160)]}),
    ]
    lines = ingest_each(store, batches)
    assert (lines[-1][A].invocations, lines[-1][A].status) == (2, "complete")


def test_an_open_root_is_running_while_its_process_lives_and_incomplete_once_it_ended(
    store: Store, make_batch: BatchFactory, clock: FakeClock
) -> None:
    ingest_each(
        store,
        [
            make_batch(7, 1, {1: [start(1, 100, A), start(2, 110, A, parent=1)]}),
            make_batch(8, 1, {1: [start(1, 100, B)]}, heartbeat_ms=100),
            make_batch(9, 1, {1: [start(1, 100, C), wire.End(1, 150)]}),
        ],
    )
    store.ingest(make_batch(7, 2, {1: [wire.End(1, 300)]}, final=True), 4)
    clock.now_ns += 10**12  # process 8 is lost: silent far past its heartbeat
    lines = agrees(store)
    # A's root ended: its call 2, which its process ended without ending, is detached.
    assert {seq: line.status for seq, line in lines.items()} == {
        A: "complete",
        B: "incomplete",
        C: "complete",
    }


def test_a_sequence_a_foreign_system_started_has_a_remote_root_until_its_hand_off_is_recorded(
    store: Store, make_batch: BatchFactory
) -> None:
    lines = ingest_each(
        store,
        [
            make_batch(7, 1, {1: [start(1, 100, A, hid=FOREIGN_HID), start(2, 110, A, parent=1)]}),
            make_batch(8, 1, {1: [start(1, 105, A, hid=LOCAL_HID)]}),
            make_batch(7, 2, {1: [wire.End(2, 120), wire.End(1, 130)]}),
            make_batch(8, 2, {1: [wire.End(1, 140)]}),
            make_batch(9, 1, {1: [start(1, 90, A), handoff(LOCAL_HID, 1, 95, A)]}),
        ],
    )
    assert [(s[A].root, s[A].processes, s[A].status) for s in lines] == [
        (REMOTE_PARENT, 1, "running"),
        (REMOTE_PARENT, 2, "running"),
        (REMOTE_PARENT, 2, "running"),
        (REMOTE_PARENT, 2, "complete"),
        ("app.m1", 3, "running"),  # a true root arrived: it is open
    ]


def test_the_earliest_true_root_wins_whichever_batch_brings_it(
    store: Store, make_batch: BatchFactory
) -> None:
    lines = ingest_each(
        store,
        [
            make_batch(7, 1, {1: [start(5, 150, A, parent=4, method=3), wire.End(5, 160)]}),
            make_batch(7, 2, {2: [start(6, 170, A, parent=4, hid=LOCAL_HID, method=4)]}),
            make_batch(7, 3, {1: [start(4, 140, A, method=2)]}),
            make_batch(8, 1, {1: [start(1, 100, A, method=1), wire.End(1, 300)]}),
        ],
    )
    assert [s[A].root for s in lines] == ["app.m3", "app.m3", "app.m2", "app.m1"]


def test_lossy_errors_and_many_sequences_in_one_batch_each_get_their_own_line(
    store: Store, make_batch: BatchFactory
) -> None:
    events = {
        1: [start(1, 100, A), start(2, 110, B), wire.Error(2, 120, "ValueError")],
        2: [start(3, 130, C), start(4, 140, D, parent=3)],
        3: [start(5, 150, A, parent=1), wire.End(5, 160), wire.End(1, 170)],
    }
    [lines] = ingest_each(store, [make_batch(7, 1, events, lost_seqs=[C])])
    assert {seq: (line.invocations, line.threads, line.lossy) for seq, line in lines.items()} == {
        A: (2, 2, False),
        B: (1, 1, False),
        C: (1, 1, True),
        D: (1, 1, False),
    }


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_the_limit_takes_the_most_recent_lines(
    store: Store, make_batch: BatchFactory, limit: int
) -> None:
    events = {1: [start(n, 100 * n, seq) for n, seq in enumerate([A, B, C, D], 1)]}
    store.ingest(make_batch(7, 1, events), 1)
    assert [s.seq for s in store.list_sequences(limit)] == [D, C, B, A][:limit]

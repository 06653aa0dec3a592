"""The contract every repository backend keeps, run against each backend: ingest and load, hand-
offs, the status of calls and sequences."""

from __future__ import annotations

import dataclasses

import pytest

from cmr.store import (
    InvalidBatchError,
    InvocationRecord,
    MethodRecord,
    ProcessRecord,
    Store,
    ThreadRecord,
    UnknownSequenceError,
)
from cmr.store.base import HandoffRecord, SequenceQuery
from cmr.views.model import Handoff
from cmr.views.tree.calltree import build_tree
from invoseq import wire
from tests.cmr.store.records import BatchFactory, H, S, handoff, seq_id, start

# -- ingest and load ------------------------------------------------------------------------


def test_round_trip_converts_event_times_to_wall_clock(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    other = seq_id("07e")
    batch = make_batch(
        7,
        1,
        {
            1: [start(1, 100, S), start(2, 150, S, parent=1, method=2), wire.End(2, 180)],
            2: [start(3, 160, other, method=3), wire.End(3, 170)],
        },
    )
    assert store.ingest(batch, received_ns=123) is True
    store.ingest(make_batch(7, 2, {1: [wire.End(1, 300)]}), received_ns=456)

    data = store.load_sequence(S)

    assert data.seq == S
    assert data.invocations == [
        InvocationRecord(7, 1, 0, 0, 1, 1, clock_offset_ns + 100, clock_offset_ns + 300, None),
        InvocationRecord(7, 2, 1, 0, 1, 2, clock_offset_ns + 150, clock_offset_ns + 180, None),
    ]
    # Only what this sequence uses: method 3 and thread 2 belong to the other sequence.
    assert data.methods == {
        (7, 1): MethodRecord("app", "m1", "/src/app.py", 11),
        (7, 2): MethodRecord("app", "m2", "/src/app.py", 12),
    }
    assert data.threads == {(7, 1): ThreadRecord(1001, "thread-1")}
    assert data.processes == {
        7: ProcessRecord(7, 4242, "testhost", "platform-1", ("app.py", "--fast"), False, 0, 456)
    }


def test_load_of_an_unknown_sequence_fails_clearly(store: Store) -> None:
    with pytest.raises(UnknownSequenceError, match=f"no sequence {S.hex()}"):
        store.load_sequence(S)


def test_duplicate_batch_is_stored_once_and_counted(store: Store, make_batch: BatchFactory) -> None:
    batch = make_batch(7, 1, {1: [start(1, 100, S), wire.End(1, 200)]})

    assert store.ingest(batch, 1) is True
    assert store.ingest(batch, 2) is False

    assert len(store.load_sequence(S).invocations) == 1
    stats = store.stats()
    assert (stats.batches, stats.duplicate_batches, stats.events) == (1, 1, 2)
    assert stats.processes[0].last_seen_ns == 1  # a duplicate stores nothing, not even a visit


def test_same_batch_number_from_another_process_is_not_a_duplicate(
    store: Store, make_batch: BatchFactory
) -> None:
    assert store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), 1)
    assert store.ingest(make_batch(8, 1, {1: [start(1, 100, S)]}), 1)

    assert len(store.load_sequence(S).invocations) == 2


def test_end_may_arrive_in_a_batch_before_its_start(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    store.ingest(make_batch(7, 2, {1: [wire.End(1, 250)]}), 1)
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), 2)

    (record,) = store.load_sequence(S).invocations
    assert (record.start_ns, record.end_ns) == (clock_offset_ns + 100, clock_offset_ns + 250)
    assert store.list_sequences(1)[0].status == "complete"


def test_error_end_keeps_the_exception_name(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    events = [start(1, 100, S), start(2, 110, S, parent=1), wire.Error(2, 120, "ValueError")]
    store.ingest(make_batch(7, 1, {1: [*events, wire.Error(1, 130, "KeyError")]}), 1)

    records = store.load_sequence(S).invocations
    assert [(r.end_ns, r.error) for r in records] == [
        (clock_offset_ns + 130, "KeyError"),
        (clock_offset_ns + 120, "ValueError"),
    ]
    assert store.list_sequences(1)[0].status == "complete"


def test_a_batch_whose_times_overflow_is_refused_whole(
    store: Store, make_batch: BatchFactory
) -> None:
    events = [start(1, 100, S), wire.End(1, 2**63 - 1)]
    with pytest.raises(InvalidBatchError):
        store.ingest(make_batch(7, 1, {1: events}), 1)

    assert store.list_sequences(10) == []
    assert store.stats().batches == 0
    # Nothing was kept, so the same batch number can still be stored.
    assert store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), 1) is True


def test_a_group_of_batches_is_stored_as_each_would_be_alone(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    first = make_batch(7, 1, {1: [start(1, 100, S), start(2, 110, S, parent=1)]})
    overflowing = make_batch(7, 2, {1: [start(3, 100, S), wire.End(3, 2**63 - 1)]})
    ending = make_batch(7, 3, {1: [wire.End(2, 120), wire.End(1, 200)]})

    outcomes = store.ingest_many([first, overflowing, first, ending], received_ns=5)

    assert outcomes[0] is True
    assert isinstance(outcomes[1], InvalidBatchError)
    assert outcomes[2:] == [False, True]  # the same batch twice in a group: stored once
    records = store.load_sequence(S).invocations
    assert [(r.iid, r.end_ns) for r in records] == [
        (1, clock_offset_ns + 200),
        (2, clock_offset_ns + 120),
    ]
    stats = store.stats()
    assert (stats.batches, stats.duplicate_batches, stats.events) == (2, 1, 4)
    (line,) = store.list_sequences(10)
    assert (line.invocations, line.status) == (2, "complete")
    # The refused batch left nothing behind: its number can still be stored.
    assert store.ingest(make_batch(7, 2, {1: [start(3, 300, S)]}), 6) is True


def _spanning_batches(make_batch: BatchFactory, puid: int) -> tuple[list[wire.Batch], dict]:
    """Three consecutive batches of process ``puid`` whose sequences span them (its sequences'
    ids start with the puid): a root ended two batches later, a better root candidate arriving
    after a worse one, a root that raised, calls opened and ended a batch later, one left open;
    and the names of the sequences."""
    one, two, three = (seq_id(f"{puid}{n}") for n in ("a1", "b2", "c3"))
    batches = [
        make_batch(
            puid,
            1,
            {
                1: [start(1, 100, one), start(2, 110, one, parent=1), start(3, 120, two, parent=9)],
                2: [start(4, 130, three, method=4)],
            },
        ),
        make_batch(
            puid,
            2,
            {
                1: [wire.End(2, 150), start(5, 90, two, method=5), start(7, 160, one, parent=1)],
                2: [wire.Error(4, 170, "ValueError"), start(8, 175, two, parent=5)],
            },
        ),
        make_batch(
            puid,
            3,
            {
                1: [wire.End(1, 200), wire.End(7, 190)],
                3: [wire.End(5, 210), wire.End(3, 205)],
            },
        ),
    ]
    return batches, {one: "one", two: "two", three: "three"}


def test_sequences_a_group_shares_list_as_they_would_stored_one_batch_at_a_time(
    store: Store, make_batch: BatchFactory
) -> None:
    alone, alone_names = _spanning_batches(make_batch, 7)
    grouped, grouped_names = _spanning_batches(make_batch, 8)
    for batch in alone:
        assert store.ingest(batch, received_ns=5) is True
    assert store.ingest_many(grouped, received_ns=5) == [True, True, True]

    lines = store.list_sequences(10)
    assert len(lines) == 6

    def listed(names: dict[bytes, str]) -> list[tuple[object, ...]]:
        return sorted(
            (names[line.seq], *dataclasses.astuple(line)[1:]) for line in lines if line.seq in names
        )

    assert listed(grouped_names) == listed(alone_names)
    by_name = {row[0]: row for row in listed(grouped_names)}
    # (name, root, start, end, invocations, threads, processes, status, lossy, error)
    assert by_name["one"][4:] == (3, 1, 1, "complete", False, None)
    # Its call 8 never ended, but its root did: 8 is detached, the sequence complete.
    assert by_name["two"][7] == "complete"
    assert by_name["two"][1] == "app.m5"  # the better candidate, from the second batch
    assert by_name["three"][-1] == "ValueError"


@pytest.mark.parametrize("one_batch", [False, True], ids=["two-batches", "one-batch"])
def test_a_repeated_late_end_in_a_group_changes_nothing(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int, one_batch: bool
) -> None:
    # First write wins for an event key: a forged End repeating another, later in the group
    # (in a later batch of it, or later in the same batch), leaves the sequence's end where the
    # first put it (the root opened in an earlier group).
    assert store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), received_ns=5) is True
    if one_batch:
        both = make_batch(7, 2, {1: [wire.End(1, 200)], 2: [wire.End(1, 900)]})
        assert store.ingest_many([both], received_ns=6) == [True]
    else:
        ended = make_batch(7, 2, {1: [wire.End(1, 200)]})
        repeated = make_batch(7, 3, {1: [wire.End(1, 900)]})
        assert store.ingest_many([ended, repeated], received_ns=6) == [True, True]

    (line,) = store.list_sequences(10)
    assert (line.end_ns, line.status) == (clock_offset_ns + 200, "complete")
    # The listing's duration key says so too (100 ns, not 800).
    assert store.list_sequences(10, SequenceQuery(min_duration_ns=500)) == []
    assert len(store.list_sequences(10, SequenceQuery(max_duration_ns=500))) == 1
    [record] = store.load_sequence(S).invocations
    assert record.end_ns == clock_offset_ns + 200


# -- hand-offs ------------------------------------------------------------------------------


def test_hand_off_round_trip_keeps_submitter_kind_callable_and_wall_time(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    names = {1: "app.main", 2: "app.work", 9: "app.submitted"}
    batch = make_batch(
        7,
        1,
        {
            1: [start(1, 100, S), handoff(H, 1, 110, S, method=9), wire.End(1, 300)],
            2: [start(2, 130, S, parent=1, hid=H, method=2), wire.End(2, 200)],
        },
        methods=names,
    )
    store.ingest(batch, 1)

    data = store.load_sequence(S)

    assert data.handoffs == {H: HandoffRecord(H, 7, 1, "thread", 9, clock_offset_ns + 110)}
    assert [(r.iid, r.parent, r.hid) for r in data.invocations] == [(1, 0, 0), (2, 1, H)]
    # The handed-off callable is named even though no invocation of it was recorded.
    assert data.methods[7, 9] == MethodRecord("app", "submitted", "/src/app.py", 19)
    assert store.stats().events == 5  # a hand-off is an event like any other


def test_a_hand_off_arriving_after_the_work_it_started_still_links(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    # Process 7 submits from iid 2 to process 8; process 8's batch is stored first, and process
    # 7's Handoff only comes with its next batch.
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S), start(2, 110, S, parent=1, method=2)]}), 1)
    store.ingest(
        make_batch(8, 1, {1: [start(1, 150, S, hid=H, method=3), wire.End(1, 170)]}, pid=88), 2
    )
    orphan = build_tree(store.load_sequence(S)).root.children[-1]
    assert (orphan.name, orphan.handoff) == ("app.m3", None)  # under the root until it is known

    store.ingest(make_batch(7, 2, {1: [handoff(H, 2, 120, S, kind="process")]}), 3)

    tree = build_tree(store.load_sequence(S))
    (submitter,) = tree.root.children
    (worker,) = submitter.children
    assert (submitter.name, worker.name, worker.process.pid) == ("app.m2", "app.m3", 88)
    assert worker.handoff == Handoff(H, "process", clock_offset_ns + 120, 30)


def test_a_hand_off_is_kept_before_any_invocation_of_its_sequence_arrives(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 2, {1: [handoff(H, 1, 120, S)]}), 1)
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), 2)

    assert list(store.load_sequence(S).handoffs) == [H]


def test_a_hand_off_is_found_by_its_hid_alone(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    other = seq_id("07e")
    # Recorded by process 7 under another sequence id; continued in S by process 8.
    store.ingest(make_batch(7, 1, {1: [start(1, 100, other), handoff(H, 1, 110, other)]}), 1)
    store.ingest(make_batch(8, 1, {1: [start(1, 150, S, hid=H)]}), 2)

    data = store.load_sequence(S)

    assert data.handoffs == {H: HandoffRecord(H, 7, 1, "thread", 9, clock_offset_ns + 110)}
    assert set(data.processes) == {7, 8}  # the submitter's process comes with it
    assert (7, 9) in data.methods


def test_the_first_hand_off_with_a_hid_wins(store: Store, make_batch: BatchFactory) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S), handoff(H, 1, 110, S)]}), 1)
    store.ingest(make_batch(8, 1, {1: [handoff(H, 5, 500, S, kind="task")]}), 2)

    assert store.load_sequence(S).handoffs[H].puid == 7


def test_a_hand_off_whose_time_overflows_refuses_its_batch(
    store: Store, make_batch: BatchFactory
) -> None:
    events = [start(1, 100, S), handoff(H, 1, 2**63 - 1, S)]
    with pytest.raises(InvalidBatchError):
        store.ingest(make_batch(7, 1, {1: events}), 1)

    assert store.stats().batches == 0


# -- statuses -------------------------------------------------------------------------------


def test_open_invocation_of_a_live_process_is_running(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S), start(2, 110, S, parent=1)]}), 1)

    (summary,) = store.list_sequences(10)
    assert (summary.status, summary.end_ns) == ("running", None)
    assert [r.end_ns for r in store.load_sequence(S).invocations] == [None, None]


def test_open_invocation_of_an_ended_process_is_incomplete(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S), start(2, 110, S, parent=1)]}), 1)
    store.ingest(make_batch(7, 2, {1: [wire.End(2, 120)]}, final=True), 2)

    (summary,) = store.list_sequences(10)
    assert (summary.status, summary.end_ns) == ("incomplete", None)
    assert store.load_sequence(S).processes[7].ended is True


def test_finished_sequence_is_complete(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S), wire.End(1, 200)]}), 1)

    (summary,) = store.list_sequences(10)
    assert (summary.status, summary.end_ns) == ("complete", clock_offset_ns + 200)


def test_a_root_its_process_never_ended_is_incomplete_whatever_runs_elsewhere(
    store: Store, make_batch: BatchFactory
) -> None:
    # The status follows the root: process 7 ended without ending it, so the sequence never
    # will, though process 8 still runs a call of it.
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}, final=True), 1)
    store.ingest(make_batch(8, 1, {1: [start(1, 150, S, hid=3)]}), 2)
    assert store.list_sequences(1)[0].status == "incomplete"

    store.ingest(make_batch(8, 2, {1: [wire.End(1, 160)]}), 3)
    assert store.list_sequences(1)[0].status == "incomplete"

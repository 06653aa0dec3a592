"""The contract every repository backend keeps: one suite, run against each backend."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from cmr.store import (
    LOST_GRACE_MS,
    MISSED_HEARTBEATS,
    REMOTE_PARENT,
    AmbiguousSequenceError,
    InvalidBatchError,
    InvocationRecord,
    MethodRecord,
    ProcessRecord,
    Store,
    StoreError,
    ThreadRecord,
    UnknownSequenceError,
    default_db_path,
    open_store,
)
from cmr.store.base import HandoffRecord
from cmr.store.sqlite.schema import (
    HANDOFFS_SCHEMA,
    HEARTBEAT_SCHEMA,
    LEGACY_EVENTS_SCHEMA,
    LOST_SEQS_SCHEMA,
    METHODS_BY_RECENT_SEQUENCE,
    PACKED_SCHEMA,
    SAMPLES_SCHEMA,
    SCHEMA,
    SCHEMA_VERSION,
    SEQUENCE_BATCHES,
)
from cmr.views.calltree import Handoff, build_tree, walk
from tests.cmr.conftest import FakeClock
from tracer import wire

BatchFactory = Callable[..., wire.Batch]


def seq_id(hex_prefix: str) -> bytes:
    """A sequence id starting with ``hex_prefix`` (zero-padded)."""
    return bytes.fromhex(hex_prefix.ljust(32, "0"))


def start(
    iid: int, t_ns: int, seq: bytes, *, parent: int = 0, hid: int = 0, method: int = 1
) -> wire.Start:
    return wire.Start(iid=iid, parent=parent, hid=hid, method=method, t_ns=t_ns, seq=seq)


def handoff(
    hid: int, parent: int, t_ns: int, seq: bytes, *, kind: str = "thread", method: int = 9
) -> wire.Handoff:
    return wire.Handoff(hid=hid, parent=parent, kind=kind, method=method, t_ns=t_ns, seq=seq)


S = seq_id("5e9")
H = 0x5EED_0000_0000_0001


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


def test_running_wins_over_incomplete_across_processes(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}, final=True), 1)
    store.ingest(make_batch(8, 1, {1: [start(1, 150, S, hid=3)]}), 2)
    assert store.list_sequences(1)[0].status == "running"

    store.ingest(make_batch(8, 2, {1: [wire.End(1, 160)]}), 3)
    assert store.list_sequences(1)[0].status == "incomplete"


# -- processes that stop sending -----------------------------------------------------------

HEARTBEAT_MS = 200
#: How long a process with a 200 ms heartbeat may stay silent: 3 * 200 ms + 1 s.
SILENCE_NS = (MISSED_HEARTBEATS * HEARTBEAT_MS + LOST_GRACE_MS) * 1_000_000


def test_the_lost_bound_is_three_heartbeats_and_a_second() -> None:
    assert (MISSED_HEARTBEATS, LOST_GRACE_MS) == (3, 1_000)
    assert SILENCE_NS == 1_600_000_000


def test_a_process_silent_past_its_heartbeat_bound_is_lost_until_it_speaks_again(
    store: Store, make_batch: BatchFactory, clock: FakeClock
) -> None:
    seen = clock.now_ns
    batch = make_batch(7, 1, {1: [start(1, 100, S)]}, heartbeat_ms=HEARTBEAT_MS)
    store.ingest(batch, seen)

    clock.now_ns = seen + SILENCE_NS  # silent for exactly the bound: not yet lost
    (process,) = store.stats().processes
    assert (process.heartbeat_ms, process.lost, process.state) == (HEARTBEAT_MS, False, "alive")
    assert store.list_sequences(1)[0].status == "running"

    clock.now_ns += 1
    (process,) = store.stats().processes
    assert (process.lost, process.state, process.last_seen_ns) == (True, "lost", seen)
    assert store.load_sequence(S).processes[7].lost is True
    assert store.list_sequences(1)[0].status == "incomplete"
    assert build_tree(store.load_sequence(S)).root.status == "incomplete"

    # A batch (an empty heartbeat will do) proves it was alive after all.
    store.ingest(make_batch(7, 2, {}, heartbeat_ms=HEARTBEAT_MS), clock.now_ns)
    assert store.stats().processes[0].state == "alive"
    assert store.list_sequences(1)[0].status == "running"


def test_a_process_without_a_heartbeat_is_never_lost(
    store: Store, make_batch: BatchFactory, clock: FakeClock
) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), clock.now_ns)
    clock.now_ns += 10**18  # thirty years of silence

    assert store.stats().processes[0].state == "alive"
    assert store.list_sequences(1)[0].status == "running"


def test_an_ended_process_is_ended_not_lost(
    store: Store, make_batch: BatchFactory, clock: FakeClock
) -> None:
    batch = make_batch(7, 1, {1: [start(1, 100, S)]}, final=True, heartbeat_ms=HEARTBEAT_MS)
    store.ingest(batch, clock.now_ns)
    clock.now_ns += 2 * SILENCE_NS

    (process,) = store.stats().processes
    assert (process.ended, process.lost, process.state) == (True, False, "ended")
    assert store.list_sequences(1)[0].status == "incomplete"


def test_the_heartbeat_of_the_latest_batch_received_counts(
    store: Store, make_batch: BatchFactory, clock: FakeClock
) -> None:
    seen = clock.now_ns
    store.ingest(make_batch(7, 2, {}, heartbeat_ms=5_000), seen + 10)
    store.ingest(make_batch(7, 1, {}, heartbeat_ms=HEARTBEAT_MS), seen)  # received earlier on
    clock.now_ns = seen + 10 + SILENCE_NS + 1  # lost by 200 ms, alive by 5 s

    (process,) = store.stats().processes
    assert (process.heartbeat_ms, process.state) == (5_000, "alive")

    store.ingest(make_batch(7, 3, {}, heartbeat_ms=HEARTBEAT_MS), seen + 20)
    assert store.stats().processes[0].heartbeat_ms == HEARTBEAT_MS


def test_a_live_process_keeps_a_sequence_running_while_another_is_lost(
    store: Store, make_batch: BatchFactory, clock: FakeClock
) -> None:
    seen = clock.now_ns
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}, heartbeat_ms=HEARTBEAT_MS), seen)
    store.ingest(make_batch(8, 1, {1: [start(1, 150, S, hid=3)]}), seen)
    clock.now_ns = seen + SILENCE_NS + 1

    assert store.list_sequences(1)[0].status == "running"
    tree = build_tree(store.load_sequence(S))
    assert [(node.process.puid, node.status) for node, _ in walk(tree.root)] == [
        (7, "incomplete"),
        (8, "running"),
    ]

    store.ingest(make_batch(8, 2, {1: [wire.End(1, 160)]}), clock.now_ns)
    assert store.list_sequences(1)[0].status == "incomplete"


# -- listing --------------------------------------------------------------------------------


def test_list_is_most_recent_first_with_counts_and_limit(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    first, second, third = seq_id("aa"), seq_id("bb"), seq_id("cc")
    # `first` spans two threads of process 7 and one thread of process 8 (tid 1 again).
    store.ingest(
        make_batch(
            7,
            1,
            {
                1: [start(1, 100, first), wire.End(1, 400), start(4, 500, third)],
                2: [start(2, 120, first, hid=5, method=2), wire.End(2, 130)],
            },
        ),
        1,
    )
    store.ingest(make_batch(8, 1, {1: [start(1, 140, first, hid=6), wire.End(1, 150)]}), 2)
    store.ingest(make_batch(9, 1, {1: [start(1, 300, second), wire.End(1, 310)]}), 3)

    listed = store.list_sequences(10)

    assert [s.seq for s in listed] == [third, second, first]
    oldest = listed[2]
    assert (oldest.root, oldest.start_ns, oldest.end_ns) == (
        "app.m1",
        clock_offset_ns + 100,
        clock_offset_ns + 400,
    )
    assert (oldest.invocations, oldest.threads, oldest.processes) == (3, 3, 2)
    assert [s.seq for s in store.list_sequences(2)] == [third, second]
    assert store.list_sequences(0) == []


def test_list_rejects_a_negative_limit(store: Store) -> None:
    with pytest.raises(StoreError, match="limit"):
        store.list_sequences(-1)


def test_root_is_the_invocation_without_parent_or_hand_off(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    # The child process's clock runs early, so its hand-off invocation "starts" first; its
    # Handoff is in flight, so until more arrives it looks like a call from a foreign system.
    store.ingest(make_batch(8, 1, {1: [start(1, 50, S, hid=9, method=2)]}), 1)
    assert store.list_sequences(1)[0].root == REMOTE_PARENT

    store.ingest(make_batch(7, 1, {1: [start(1, 100, S, method=1)]}), 2)

    (summary,) = store.list_sequences(1)
    assert summary.root == "app.m1"
    assert summary.start_ns == clock_offset_ns + 50  # the sequence's earliest start


def test_without_a_root_but_with_a_lost_parent_the_best_candidate_is_named(
    store: Store, make_batch: BatchFactory
) -> None:
    # iid 4's Start was lost: nothing suggests a foreign caller, so the earliest call is named.
    store.ingest(make_batch(7, 1, {1: [start(5, 100, S, parent=4, method=2)]}), 1)
    assert store.list_sequences(1)[0].root == "app.m2"
    # A continued hand-off whose Start names a parent is not a foreign call either.
    store.ingest(make_batch(8, 1, {1: [start(1, 90, S, parent=3, hid=H, method=3)]}), 2)
    assert store.list_sequences(1)[0].root == "app.m2"


# -- sequences started by a foreign system --------------------------------------------------


def test_a_sequence_entered_from_a_foreign_system_is_rooted_at_its_remote_parent(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    # Two calls came in from the foreign system, each with its own traceparent parent-id.
    events = [start(1, 100, S, hid=H, method=2), start(2, 110, S, parent=1, method=3)]
    store.ingest(make_batch(7, 1, {1: events, 2: [start(3, 150, S, hid=H + 1, method=4)]}), 1)

    (summary,) = store.list_sequences(1)
    assert (summary.root, summary.end_ns, summary.status) == (REMOTE_PARENT, None, "running")

    store.ingest(make_batch(7, 2, {1: [wire.End(2, 120), wire.End(1, 300)]}), 2)
    assert store.list_sequences(1)[0].end_ns is None  # call 3 still runs: so does the parent
    store.ingest(make_batch(7, 3, {2: [wire.End(3, 250)]}), 3)

    (summary,) = store.list_sequences(1)
    assert (summary.root, summary.end_ns, summary.status) == (
        REMOTE_PARENT,
        clock_offset_ns + 300,  # the latest end of the calls it made here
        "complete",
    )
    tree = build_tree(store.load_sequence(S))
    assert (tree.root.name, tree.root.end_ns) == (summary.root, summary.end_ns)
    assert [child.name for child in tree.root.children] == ["app.m2", "app.m4"]


def test_a_recorded_remote_hand_off_links_normally_instead(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    # Our own process 7 called process 8 over HTTP: it recorded the hand-off it injected.
    store.ingest(make_batch(8, 1, {1: [start(1, 150, S, hid=H, method=2)]}, pid=88), 1)
    assert store.list_sequences(1)[0].root == REMOTE_PARENT  # until the caller's batch arrives

    caller = [start(1, 100, S), handoff(H, 1, 120, S, kind="remote"), wire.End(1, 300)]
    store.ingest(make_batch(7, 1, {1: caller}), 2)
    store.ingest(make_batch(8, 2, {1: [wire.End(1, 200)]}, pid=88), 3)

    assert store.list_sequences(1)[0].root == "app.m1"
    tree = build_tree(store.load_sequence(S))
    (callee,) = tree.root.children
    assert callee.handoff == Handoff(H, "remote", clock_offset_ns + 120, 30)


def test_a_recorded_hand_off_without_a_caller_here_is_not_a_remote_parent(
    store: Store, make_batch: BatchFactory
) -> None:
    # The Handoff is known (recorded under another sequence id), so the call is no foreign
    # entry; without a root it is named as the best candidate, as a lost root would be.
    other = seq_id("07e")
    store.ingest(make_batch(7, 1, {1: [handoff(H, 1, 110, other)]}), 1)
    store.ingest(make_batch(8, 1, {1: [start(1, 150, S, hid=H, method=2)]}), 2)

    assert store.list_sequences(1)[0].root == "app.m2"


def test_root_without_method_info_gets_a_placeholder_name(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S, method=3)]}, methods={}), 1)

    assert store.list_sequences(1)[0].root == "<unknown method 3>"


# -- prefix resolution ----------------------------------------------------------------------

PREFIXED = [seq_id("ab12"), seq_id("ab34"), seq_id("ffee"), seq_id("0123")]


@pytest.fixture(name="prefixed")
def fixture_prefixed(store: Store, make_batch: BatchFactory) -> Store:
    events = [start(i + 1, 100 + i, seq) for i, seq in enumerate(PREFIXED)]
    store.ingest(make_batch(7, 1, {1: events}), 1)
    return store


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("ab12", PREFIXED[0]),
        (PREFIXED[1].hex(), PREFIXED[1]),
        ("AB3", PREFIXED[1]),  # upper case and an odd number of digits
        ("f", PREFIXED[2]),  # the top of the id space
        ("0", PREFIXED[3]),
    ],
)
def test_prefix_resolves_to_its_only_match(prefixed: Store, prefix: str, expected: bytes) -> None:
    assert prefixed.resolve_sequence(prefix) == expected


def test_unknown_prefix_says_so(prefixed: Store) -> None:
    with pytest.raises(UnknownSequenceError, match=r"^no sequence matches 'ab5'$"):
        prefixed.resolve_sequence("ab5")


def test_ambiguous_prefix_names_the_matches(prefixed: Store) -> None:
    with pytest.raises(AmbiguousSequenceError) as caught:
        prefixed.resolve_sequence("Ab")

    assert str(caught.value) == (
        "'ab' matches 2 sequences: ab1200000000…, ab3400000000…; give more digits"
    )


def test_ambiguous_prefix_shows_a_few_of_many_matches(
    store: Store, make_batch: BatchFactory
) -> None:
    events = [start(i + 1, 100, seq_id(f"7{i}")) for i in range(7)]
    store.ingest(make_batch(7, 1, {1: events}), 1)

    with pytest.raises(
        AmbiguousSequenceError, match=r"^'7' matches 7 sequences: 70.*, 74[0-9]*…, …;"
    ):
        store.resolve_sequence("7")


@pytest.mark.parametrize("prefix", ["", "xyz", "ab-1", "a" * 33])
def test_malformed_prefix_is_refused(prefixed: Store, prefix: str) -> None:
    with pytest.raises(UnknownSequenceError, match="is not a sequence id: give 1 to 32 hex digits"):
        prefixed.resolve_sequence(prefix)


# -- stats ----------------------------------------------------------------------------------


def test_stats_count_events_batches_and_rejections(store: Store, make_batch: BatchFactory) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S), wire.End(1, 200)]}), 10)
    store.ingest(make_batch(7, 2, {1: [start(2, 300, S)], 2: [start(3, 300, S)]}), 20)
    store.record_rejected("garbage")
    store.record_rejected("garbage", 2)
    store.record_rejected("decode")

    stats = store.stats()

    assert (stats.batches, stats.duplicate_batches, stats.events) == (2, 0, 4)
    assert stats.rejected == {"decode": 1, "garbage": 3}


def test_stats_keep_the_largest_drop_count_per_process(
    store: Store, make_batch: BatchFactory
) -> None:
    # Drop counts are cumulative; batches may arrive out of order.
    store.ingest(make_batch(7, 2, {}, dropped=5), 30)
    store.ingest(make_batch(7, 1, {}, dropped=3), 10)
    store.ingest(make_batch(8, 1, {}, final=True), 20)

    processes = store.stats().processes

    assert [(p.puid, p.dropped, p.ended, p.last_seen_ns, p.state) for p in processes] == [
        (7, 5, False, 30, "alive"),
        (8, 0, True, 20, "ended"),
    ]


def test_closed_store_refuses_use(store: Store) -> None:
    store.close()

    with pytest.raises(StoreError, match="closed"):
        store.stats()


# -- SQLite specifics -----------------------------------------------------------------------


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


def older_schema(path: str, version: int) -> None:
    """Write a repository as release ``version`` did: versions 1 to 5 kept a row per Start and End
    instead of packed batches, version 4 had no lost sequences table, version 3 no sample tables
    either, version 2 no heartbeat column either, version 1 no hand-offs table either. It holds
    one process (seen at 123) and one running call."""
    left_out = (
        PACKED_SCHEMA
        + {
            5: (),
            4: LOST_SEQS_SCHEMA,
            3: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA,
            2: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA + HEARTBEAT_SCHEMA,
            1: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA + HEARTBEAT_SCHEMA + HANDOFFS_SCHEMA,
        }[version]
    )
    with sqlite3.connect(path) as conn:
        for statement in SCHEMA + LEGACY_EVENTS_SCHEMA:
            if statement not in left_out and not statement.startswith("PRAGMA user_version"):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute(
            "INSERT INTO processes (puid, pid, host, platform_id, argv, clock_offset_ns, "
            "started_ns, ended, dropped, last_seen_ns) "
            "VALUES (7, 4242, 'old', 'pf', '[\"old.py\"]', 0, 0, 0, 0, 123)"
        )
        conn.execute("INSERT INTO starts VALUES (7, 1, ?, 0, 0, 1, 1, 100)", (S,))
        conn.execute("INSERT INTO sequences VALUES (?, 100)", (S,))
    conn.close()


def user_version(path: str) -> int:
    with sqlite3.connect(path) as conn:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    return version


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
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


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_an_older_repository_is_not_read_before_it_is_upgraded(
    tmp_path: Path, version: int
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    older_schema(path, version)

    with pytest.raises(
        StoreError,
        match=rf"schema version {version}, older than .* \(6\): run `cmr serve` or `tracer run`",
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
    params = {"since": 0} if query == METHODS_BY_RECENT_SEQUENCE else (S,)
    with sqlite3.connect(path) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}", params)]
    conn.close()

    assert plan
    assert not [step for step in plan if step.startswith("SCAN")], plan


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

    assert path.is_file()

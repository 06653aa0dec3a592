"""The store contract: processes that stop sending (alive, ended, lost), and listing sequences with
their roots."""

from __future__ import annotations

import pytest

from cmr.store import (
    LOST_GRACE_MS,
    MISSED_HEARTBEATS,
    REMOTE_PARENT,
    Store,
    StoreError,
)
from cmr.views.model import Handoff, walk
from cmr.views.tree.calltree import build_tree
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import BatchFactory, H, S, handoff, seq_id, start

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


def test_a_sequence_whose_root_process_is_lost_is_incomplete_while_another_still_runs(
    store: Store, make_batch: BatchFactory, clock: FakeClock
) -> None:
    seen = clock.now_ns
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}, heartbeat_ms=HEARTBEAT_MS), seen)
    store.ingest(make_batch(8, 1, {1: [start(1, 150, S, hid=3)]}), seen)
    assert store.list_sequences(1)[0].status == "running"
    clock.now_ns = seen + SILENCE_NS + 1

    # The status follows the root, which will never end.
    assert store.list_sequences(1)[0].status == "incomplete"
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

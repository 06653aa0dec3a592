"""The contract for detached work (issue 34, point 3), run against each backend: a sequence's
status follows its root, so a request that starts a thread, task or process it does not wait for
(or leaves a generator suspended) completes when its own call ends. The work it left running is
*detached* in the tree, under the call that started it, and its later calls still join the
sequence. The listing, the listing by status and the tree agree."""

from __future__ import annotations

from collections.abc import Callable

from cmr.store import Store
from cmr.store.base import REMOTE_PARENT, SequenceQuery, SequenceSummary, shown_status
from cmr.store.rules import summarize
from cmr.views.model import Node, walk
from cmr.views.tree.calltree import build_tree
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import handoff, seq_id, start

BatchFactory = Callable[..., wire.Batch]
A, B = seq_id("a1"), seq_id("b2")
WRITER_HID = 0x7E11_0000_0000_0001
FOREIGN_HID = 0x70F0_0000_0000_0001
SECOND_FOREIGN_HID = 0x70F0_0000_0000_0002
STATUSES = ("running", "incomplete", "complete", "error")


def line_of(store: Store, seq: bytes) -> SequenceSummary:
    """The sequence's listing line, checked against its records and its tree, and found by a
    query for its status (and by no other status's)."""
    (line,) = [s for s in store.list_sequences(100) if s.seq == seq]
    data = store.load_sequence(seq, samples=False)
    assert line == summarize(data, line.start_ns)
    word = shown_status(line.status, line.error)
    assert build_tree(data).shown_status == word
    for status in STATUSES:
        listed = [s.seq for s in store.list_sequences(100, SequenceQuery(status=status))]
        assert (seq in listed) == (status == word), status
    return line


def nodes(store: Store, seq: bytes) -> dict[str, Node]:
    return {node.name: node for node, _ in walk(build_tree(store.load_sequence(seq)).root)}


def request_with_writer(make_batch: BatchFactory, *, ended: bool) -> list[wire.Batch]:
    """app.m1 (the request, thread 1) hands app.m2 to a writer thread (2), which outlives it
    when ``ended``: the request's End comes, the writer's does not."""
    request = [start(1, 100, A), handoff(WRITER_HID, 1, 110, A)]
    writer = [start(2, 120, A, parent=1, hid=WRITER_HID, method=2)]
    batches = [make_batch(7, 1, {1: request, 2: writer})]
    if ended:
        batches.append(make_batch(7, 2, {1: [wire.End(1, 200)]}))
    return batches


def test_a_request_is_running_until_its_own_call_ends(
    store: Store, make_batch: BatchFactory
) -> None:
    for batch in request_with_writer(make_batch, ended=False):
        store.ingest(batch, 1)

    assert line_of(store, A).status == "running"
    assert nodes(store, A)["app.m2"].detached is False  # its caller has not ended


def test_a_request_whose_thread_outlives_it_completes_and_the_thread_is_detached(
    store: Store, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    for batch in request_with_writer(make_batch, ended=True):
        store.ingest(batch, 1)

    line = line_of(store, A)
    assert (line.root, line.status, line.end_ns) == ("app.m1", "complete", clock_offset_ns + 200)
    writer = nodes(store, A)["app.m2"]
    assert (writer.status, writer.detached, writer.handoff is not None) == (
        "running",
        True,
        True,
    )


def test_the_later_calls_of_a_detached_thread_join_the_sequence(
    store: Store, make_batch: BatchFactory
) -> None:
    for batch in request_with_writer(make_batch, ended=True):
        store.ingest(batch, 1)
    # The writer's call ends after the request did, and it calls again, under the same caller.
    later = [wire.End(2, 300), start(3, 400, A, parent=1, hid=WRITER_HID, method=3)]
    store.ingest(make_batch(7, 3, {2: later}), 2)

    line = line_of(store, A)
    assert (line.status, line.invocations, line.threads) == ("complete", 3, 2)
    found = nodes(store, A)
    assert [(n.name, n.status, n.detached) for n in found["app.m1"].children] == [
        ("app.m2", "ok", True),  # ended after its caller, on the same clock
        ("app.m3", "running", True),
    ]


def test_a_detached_call_its_process_never_ended_leaves_the_sequence_complete(
    store: Store, make_batch: BatchFactory
) -> None:
    batches = request_with_writer(make_batch, ended=True)
    batches.append(make_batch(7, 3, {}, final=True))
    for batch in batches:
        store.ingest(batch, 1)

    assert line_of(store, A).status == "complete"
    writer = nodes(store, A)["app.m2"]
    assert (writer.status, writer.detached) == ("incomplete", True)


def test_a_request_that_raised_is_an_error_whatever_it_left_running(
    store: Store, make_batch: BatchFactory
) -> None:
    batches = request_with_writer(make_batch, ended=False)
    batches.append(make_batch(7, 2, {1: [wire.Error(1, 200, "ValueError")]}))
    for batch in batches:
        store.ingest(batch, 1)

    line = line_of(store, A)
    assert (shown_status(line.status, line.error), line.error) == ("error", "ValueError")


def test_a_generator_left_suspended_in_the_root_s_thread_does_not_keep_it_running(
    store: Store, make_batch: BatchFactory
) -> None:
    events = [start(1, 100, A), start(2, 110, A, parent=1, method=2), wire.End(1, 200)]
    store.ingest(make_batch(7, 1, {1: events}), 1)

    assert line_of(store, A).status == "complete"
    generator = nodes(store, A)["app.m2"]
    assert (generator.status, generator.detached) == ("running", True)


def test_a_sequence_a_foreign_system_started_runs_while_one_of_its_entries_does(
    store: Store, make_batch: BatchFactory, clock: FakeClock
) -> None:
    # Two calls came in from a foreign system; the first started a thread it did not wait for.
    first = [start(1, 100, A, hid=FOREIGN_HID), handoff(WRITER_HID, 1, 105, A)]
    writer = [start(2, 110, A, parent=1, hid=WRITER_HID, method=2)]
    second = [start(1, 120, A, hid=SECOND_FOREIGN_HID, method=3)]
    store.ingest(make_batch(7, 1, {1: first, 2: writer}), clock.now_ns)
    store.ingest(make_batch(8, 1, {1: second}, heartbeat_ms=100), clock.now_ns)
    assert line_of(store, A).status == "running"

    store.ingest(make_batch(7, 2, {1: [wire.End(1, 150)]}), clock.now_ns)
    line = line_of(store, A)
    assert (line.root, line.status) == (REMOTE_PARENT, "running")  # the second entry runs

    clock.now_ns += 10**12  # process 8 is lost: its entry never ends
    assert line_of(store, A).status == "incomplete"

    store.ingest(make_batch(8, 2, {1: [wire.End(1, 160)]}, heartbeat_ms=100), clock.now_ns)
    line = line_of(store, A)
    assert (line.root, line.status) == (REMOTE_PARENT, "complete")
    assert nodes(store, A)["app.m2"].detached is True


def test_a_sequence_whose_root_was_lost_follows_the_call_it_names(
    store: Store, make_batch: BatchFactory
) -> None:
    # iid 4's Start was lost: app.m2 is named, and the status follows it, not its child.
    events = [start(5, 100, B, parent=4, method=2), start(6, 110, B, parent=5, method=3)]
    store.ingest(make_batch(7, 1, {1: events}), 1)
    assert line_of(store, B).status == "running"

    store.ingest(make_batch(7, 2, {1: [wire.End(5, 200)]}), 2)
    line = line_of(store, B)
    assert (line.root, line.status) == ("app.m2", "complete")

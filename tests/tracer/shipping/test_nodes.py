"""Spreading batches over several repository nodes, and moving on from a dead one.

The decisions (which node takes a batch, when a node is suspect, when it is tried again) are
tested here on in-memory nodes with a fake clock, so time passes exactly as a test says; the
same paths over real `cmr serve` processes are in tests/reliability/test_nodes.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from invoseq import wire
from tracer._shipping.delivery import Delivery, Outgoing
from tracer._shipping.endpoints import BASE_BACKOFF_NS, MAX_BACKOFF_NS, UNANSWERED_NS, Nodes
from tracer._shipping.transport import Transport

RESEND_NS = 2_000_000_000
PUID = 7


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


class FakeNode:
    """A repository node in memory: ``up`` False refuses every send (no connection);
    ``answering`` False takes batches and never acknowledges them (a hung node)."""

    def __init__(self) -> None:
        self.up = True
        self.answering = True
        self.received: list[int] = []  # batch numbers, in the order they arrived
        self._acks: list[wire.Ack] = []

    def send(self, body: bytes) -> bool:
        if not self.up:
            return False
        batch_no = int(body)
        self.received.append(batch_no)
        if self.answering:
            self._acks.append(wire.Ack(PUID, batch_no))
        return True

    def receive_acks(self, timeout_ms: int) -> list[wire.Ack]:
        acks, self._acks = self._acks, []
        return acks

    def close(self) -> None:
        pass


class Cluster:
    """A Delivery over named fake nodes, with its clock and the batches submitted so far."""

    def __init__(self, names: str, *, window: int = 64, queue: int = 256) -> None:
        self.clock = Clock()
        self.nodes = {name: FakeNode() for name in names}
        transports: dict[str, Transport] = dict(self.nodes)
        self.delivery = Delivery(
            Nodes(transports, clock=self.clock),
            window=window,
            queue_batches=queue,
            spool=None,
            resend_ns=RESEND_NS,
            clock=self.clock,
        )
        self.submitted = 0

    def submit(self, count: int = 1) -> None:
        for _ in range(count):
            self.submitted += 1
            body = str(self.submitted).encode()
            self.delivery.submit(Outgoing(PUID, self.submitted, body, events=2))

    def round(self) -> None:
        """What the sender's worker does each wake-up: send, then take acknowledgements."""
        self.delivery.pump()
        self.delivery.collect(0)

    def acked(self) -> dict[str, int]:
        return self.delivery.nodes.acked_by_endpoint()


@pytest.fixture(name="pair")
def fixture_pair() -> Iterator[Cluster]:
    cluster = Cluster("ab")
    yield cluster
    cluster.delivery.close()


def test_batches_take_turns_over_equal_nodes(pair: Cluster) -> None:
    for _ in range(10):
        pair.submit()
        pair.round()
    assert pair.nodes["a"].received == [1, 3, 5, 7, 9]
    assert pair.nodes["b"].received == [2, 4, 6, 8, 10]
    assert pair.acked() == {"a": 5, "b": 5}
    assert pair.delivery.counters.sent_events == 20
    assert not pair.delivery.pending()


def test_a_node_with_fewer_batches_in_flight_gets_the_next(pair: Cluster) -> None:
    pair.nodes["a"].answering = False  # slow: its batch stays in flight
    pair.submit(2)
    pair.round()
    for _ in range(3):  # b acknowledged its batch: it has fewer in flight each time
        pair.submit()
        pair.round()
    assert (pair.nodes["a"].received, pair.nodes["b"].received) == ([1], [2, 3, 4, 5])


def test_a_node_that_refuses_is_passed_over_and_nothing_waits_on_it(pair: Cluster) -> None:
    pair.nodes["a"].up = False  # nothing listens there
    pair.submit(6)
    pair.round()
    assert pair.nodes["a"].received == []
    assert pair.nodes["b"].received == [1, 2, 3, 4, 5, 6]
    assert pair.acked() == {"a": 0, "b": 6}
    assert pair.delivery.counters.resent_batches == 0
    pair.nodes["a"].up = True  # back: it takes its turn again at once
    pair.submit(2)
    pair.round()
    assert (pair.nodes["a"].received, pair.nodes["b"].received[-1:]) == ([7], [8])


def test_batches_a_silent_node_holds_move_to_another_after_the_resend_timeout(
    pair: Cluster,
) -> None:
    pair.submit(4)
    pair.round()
    pair.nodes["a"].answering = False  # hangs from now on
    pair.submit(4)
    pair.round()
    assert pair.nodes["a"].received == [1, 3, 5, 7]
    pair.clock.advance(RESEND_NS - 1)
    pair.round()
    assert pair.delivery.pending()  # not yet due
    pair.clock.advance(1)
    pair.round()
    assert pair.nodes["b"].received == [2, 4, 6, 8, 5, 7]  # a's unacknowledged two moved
    assert not pair.delivery.pending()
    assert pair.delivery.counters.resent_batches == 2
    assert pair.delivery.counters.acked_batches == 8
    # While a is suspect, new batches go to b only.
    pair.submit(3)
    pair.round()
    assert pair.nodes["b"].received[-3:] == [9, 10, 11]
    assert pair.nodes["a"].received == [1, 3, 5, 7]


def test_a_suspect_node_is_probed_with_growing_waits_and_rejoins_when_it_answers(
    pair: Cluster,
) -> None:
    a = pair.nodes["a"]
    a.answering = False
    pair.submit()
    pair.round()
    assert a.received == [1]
    probes = []
    for _ in range(4):  # each time: the batch falls due, moves to b, a waits longer
        pair.clock.advance(RESEND_NS)
        pair.round()
        suspect = pair.delivery.nodes[0]
        assert suspect.suspect
        probes.append(suspect.retry_ns - pair.clock.now)
        pair.clock.advance(suspect.retry_ns - pair.clock.now - 1)
        pair.submit()
        pair.round()  # not due yet: to b
        pair.clock.advance(1)
        pair.submit()
        pair.round()  # due: this one probes a
        assert a.received[-1] == pair.submitted
    assert probes == [BASE_BACKOFF_NS * 2**k for k in range(4)]
    a.answering = True
    pair.clock.advance(RESEND_NS)
    pair.round()  # the last probe moves to b; a is probed again later, and now answers
    pair.clock.advance(MAX_BACKOFF_NS)
    pair.submit()
    pair.round()
    assert not pair.delivery.nodes[0].suspect
    pair.submit(2)
    pair.round()
    last_two = {pair.submitted - 1, pair.submitted}
    assert {a.received[-1], pair.nodes["b"].received[-1]} == last_two  # taking turns again
    assert not pair.delivery.pending()
    assert pair.delivery.counters.sent_events == 2 * pair.submitted


def test_the_wait_between_probes_is_bounded(pair: Cluster) -> None:
    a = pair.nodes["a"]
    a.answering = False
    suspect = pair.delivery.nodes[0]
    for _ in range(20):  # a probe to a, unanswered: it moves to b, and a waits longer
        pair.clock.advance(max(0, suspect.retry_ns - pair.clock.now))
        pair.submit()
        pair.round()
        assert a.received[-1] == pair.submitted
        pair.clock.advance(RESEND_NS)
        pair.round()
    assert suspect.retry_ns - pair.clock.now == MAX_BACKOFF_NS
    assert pair.acked() == {"a": 0, "b": 20}
    assert not pair.delivery.pending()


def test_with_every_node_down_batches_wait_and_go_to_the_first_back(pair: Cluster) -> None:
    for node in pair.nodes.values():
        node.up = False
    pair.submit(5)
    for _ in range(3):
        pair.clock.advance(RESEND_NS)
        pair.round()
    assert pair.delivery.pending()
    assert pair.delivery.counters.dropped_events == 0
    pair.nodes["b"].up = True
    pair.round()
    assert pair.nodes["b"].received == [1, 2, 3, 4, 5]
    assert not pair.delivery.pending()


def test_one_node_resends_to_itself_as_a_single_endpoint_always_did() -> None:
    single = Cluster("a")
    node = single.nodes["a"]
    node.answering = False
    single.submit(2)
    single.round()
    single.clock.advance(RESEND_NS)
    single.round()
    assert node.received == [1, 2, 1, 2]  # resent to the only node, every resend timeout
    assert single.delivery.counters.resent_batches == 2
    node.up = False
    single.submit()
    single.round()
    assert single.delivery.pending()  # refused: waits, as before
    node.up = node.answering = True
    single.round()
    assert node.received[-1] == 3
    single.clock.advance(2 * RESEND_NS)  # batches 1 and 2, resent once, wait twice as long
    single.round()
    assert not single.delivery.pending()
    assert single.acked() == {"a": 3}
    single.delivery.close()


def test_a_batch_acknowledged_late_by_the_node_it_left_counts_once(pair: Cluster) -> None:
    a = pair.nodes["a"]
    a.answering = False
    pair.submit()
    pair.round()
    pair.clock.advance(RESEND_NS)
    pair.nodes["b"].answering = False
    pair.round()  # moved to b, which does not answer yet either
    a._acks.append(wire.Ack(PUID, 1))  # a answers after all
    pair.nodes["b"]._acks.append(wire.Ack(PUID, 1))  # and so does b: stored once, acked twice
    pair.round()
    assert pair.delivery.counters.acked_batches == 1
    assert pair.delivery.counters.sent_events == 2
    assert sum(pair.acked().values()) == 1
    assert not pair.delivery.nodes[0].suspect  # a answered: live again


def test_a_node_that_takes_batches_and_never_answers_is_said_once(
    pair: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Something listens at "a" that takes batches and acknowledges none (no invoseq
    repository, or one that cannot store): one warning naming it, UNANSWERED_NS after its first
    batch; "b", which answers, is never named, and "a" is not named again."""
    pair.nodes["a"].answering = False
    caplog.set_level(logging.WARNING, logger="tracer")
    for _ in range(4):
        pair.submit()
        pair.round()
    pair.clock.advance(UNANSWERED_NS - 1)
    pair.round()
    assert caplog.messages == []
    pair.clock.advance(1)
    for _ in range(3):
        pair.round()
        pair.clock.advance(UNANSWERED_NS)
    assert caplog.messages == [
        "invoseq: the repository at a took this process's batches for 30 s and acknowledged "
        "none: likely no invoseq repository listens there (or one of another protocol version), "
        "or it cannot store them (see its log); nothing this process sends there is stored yet"
    ]


def test_a_node_that_answered_once_is_never_said_unanswered(
    pair: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tracer")
    pair.submit(2)
    pair.round()  # each node acknowledged one
    pair.nodes["a"].answering = False  # hangs from now on
    for _ in range(3):
        pair.submit()
        pair.round()
        pair.clock.advance(UNANSWERED_NS)
    assert caplog.messages == []

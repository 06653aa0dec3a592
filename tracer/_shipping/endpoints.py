"""Several repository nodes behind one sender: which node takes a batch, which node is suspect,
and when a suspect node is tried again.

Nodes are ``cmr serve`` processes sharing one database; any of them may store any batch, and the
database discards a batch stored twice, so a batch is free to move from one node to another.

More in docs/architecture.md, "tracer/_shipping/endpoints.py".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import zmq

from invoseq import wire
from tracer._shipping.transport import Transport, ZmqTransport

#: The first wait before a failed node is tried again: ZeroMQ's own reconnect interval.
BASE_BACKOFF_NS: Final = 100_000_000
#: The longest wait: a node that comes back rejoins within this long after it answers again.
MAX_BACKOFF_NS: Final = 10_000_000_000
#: A node that took batches and acknowledged none this long after the first is said (once).
UNANSWERED_NS: Final = 30_000_000_000

log = logging.getLogger("tracer")


@dataclass(slots=True)
class Node:
    endpoint: str
    transport: Transport
    inflight: int = 0  # batches in the window that were last sent to this node
    failures: int = 0  # failed since the last acknowledgement; 0: live
    retry_ns: int = 0  # a suspect node is probed from this time on
    answered_ns: int = -1  # when its last acknowledgement arrived
    acked_batches: int = 0  # batches whose first acknowledgement came from this node
    first_sent_ns: int = -1  # when it first took a batch
    unanswered_said: bool = False  # warned of: took batches, acknowledged none
    #: How long its acknowledgements take (smoothed, and their mean deviation), measured on
    #: batches sent once (``observe``): 0 until the first.
    rtt_ns: int = 0
    rtt_dev_ns: int = 0

    @property
    def suspect(self) -> bool:
        return self.failures > 0


class Nodes:
    def __init__(
        self,
        transports: Mapping[str, Transport],
        *,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if not transports:
            raise ValueError("no repository node to send to")
        self._nodes = [Node(endpoint, transport) for endpoint, transport in transports.items()]
        self._clock = clock
        self._turn = 0  # where the next tie between equally loaded nodes starts
        self._unanswered = len(self._nodes)  # nodes neither answered nor said unanswered yet
        sockets = [n.transport for n in self._nodes if isinstance(n.transport, ZmqTransport)]
        self._sockets = sockets
        self._poller: zmq.Poller | None = None
        if len(self._nodes) > 1 and len(sockets) == len(self._nodes):
            self._poller = zmq.Poller()
            for transport in sockets:
                self._poller.register(transport.socket, zmq.POLLIN)

    def __len__(self) -> int:
        return len(self._nodes)

    def __getitem__(self, index: int) -> Node:
        return self._nodes[index]

    # -- sending ----------------------------------------------------------------------------------

    def send(self, body: bytes | bytearray, *, moving_from: int | None = None) -> int | None:
        """Send one batch to the best node that takes it: its index, or None when every node
        refused. ``moving_from``: the node a batch waited on in vain, tried only after the others
        (the only choice when there is one node)."""
        now = self._clock()
        for index in self._candidates(now, moving_from):
            node = self._nodes[index]
            if node.transport.send(body):
                node.inflight += 1
                if node.first_sent_ns < 0:
                    node.first_sent_ns = now
                if not node.suspect:
                    self._turn = (index + 1) % len(self._nodes)
                return index
        return None  # no connection to any node (or their queues are full)

    def _candidates(self, now: int, moving_from: int | None) -> list[int]:
        """Live nodes and suspect nodes due for a probe, fewest batches in flight first (ties
        take turns); then the node a batch moves from; then the other suspect nodes, soonest
        retry first."""
        count = len(self._nodes)
        ready = [
            index
            for index, node in enumerate(self._nodes)
            if index != moving_from
            and (not node.suspect or (now >= node.retry_ns and node.inflight == 0))
        ]
        ready.sort(key=lambda i: (self._nodes[i].inflight, (i - self._turn) % count))
        rest = [index for index in range(count) if index not in ready and index != moving_from]
        rest.sort(key=lambda i: self._nodes[i].retry_ns)
        return ready + ([moving_from] if moving_from is not None else []) + rest

    def elsewhere(self, index: int) -> bool:
        """Whether a batch leaving node ``index`` can go to another node now: a live one, or a
        suspect one due for a probe."""
        now = self._clock()
        return any(
            other != index and (not node.suspect or (now >= node.retry_ns and node.inflight == 0))
            for other, node in enumerate(self._nodes)
        )

    def failed(self, index: int) -> None:
        """The node left a batch unacknowledged: suspect. The wait before it is probed again
        grows only when it fails a probe (or first fails), not on every batch that falls due
        while it is suspect anyway."""
        node = self._nodes[index]
        now = self._clock()
        if node.suspect and now < node.retry_ns:
            return
        node.failures += 1
        node.retry_ns = now + min(BASE_BACKOFF_NS << min(node.failures - 1, 32), MAX_BACKOFF_NS)

    def settled(self, index: int) -> None:
        """A batch last sent to this node left the window (acknowledged, or retired at exit)."""
        node = self._nodes[index]
        node.inflight = max(0, node.inflight - 1)

    def moved(self, index: int) -> None:
        """A batch last sent to this node is being sent again (maybe to another node)."""
        self.settled(index)

    def observe(self, index: int, rtt_ns: int) -> None:
        """A batch sent once was acknowledged ``rtt_ns`` after it was sent (a resent one tells
        nothing: which of its sends was answered is unknown). Smoothed as TCP does (RFC 6298)."""
        node = self._nodes[index]
        if node.rtt_ns == 0:
            node.rtt_ns, node.rtt_dev_ns = rtt_ns, rtt_ns // 2
        else:
            node.rtt_dev_ns += (abs(node.rtt_ns - rtt_ns) - node.rtt_dev_ns) // 4
            node.rtt_ns += (rtt_ns - node.rtt_ns) // 8

    def patience(self, index: int, floor_ns: int) -> int:
        """How long a batch waits for this node's acknowledgement before it is sent back to it:
        ``floor_ns`` (the resend timeout), or longer when its acknowledgements take longer (a
        repository working through a backlog). RFC 6298's smoothed round trip plus four mean
        deviations, and at least twice the round trip: a backlog's round trips vary little, and
        each batch sent again lengthens every later one's (a jitter must not start a cascade)."""
        node = self._nodes[index]
        return max(floor_ns, node.rtt_ns + max(4 * node.rtt_dev_ns, node.rtt_ns))

    def answered_since(self, index: int, since_ns: int) -> bool:
        return self._nodes[index].answered_ns > since_ns

    # -- receiving --------------------------------------------------------------------------------

    def receive_acks(self, timeout_ms: int) -> list[tuple[int, wire.Ack]]:
        """(node index, acknowledgement) pairs received so far, waiting up to ``timeout_ms`` for
        the first from any node. An acknowledgement makes its node live again. What a node
        that refuses this process tells of it is logged first (``tracer._shipping.handshakes``)."""
        for transport in self._sockets:
            if transport.handshakes is not None:
                transport.handshakes.check()
        if self._unanswered:
            self._say_unanswered()
        if len(self._nodes) == 1:
            acks = [(0, ack) for ack in self._nodes[0].transport.receive_acks(timeout_ms)]
        else:
            if self._poller is not None and timeout_ms > 0 and not self._poller.poll(timeout_ms):
                return []
            acks = [
                (index, ack)
                for index, node in enumerate(self._nodes)
                for ack in node.transport.receive_acks(0)
            ]
        if acks:
            now = self._clock()
            for index in {index for index, _ in acks}:
                node = self._nodes[index]
                node.failures = 0
                if node.answered_ns < 0 and not node.unanswered_said:
                    self._unanswered -= 1
                node.answered_ns = now
        return acks

    def _say_unanswered(self) -> None:
        """Warn of each node that took batches and never answered, UNANSWERED_NS after the
        first; once per node, and not for a node that answered once."""
        now = self._clock()
        for node in self._nodes:
            if node.answered_ns >= 0 or node.first_sent_ns < 0 or node.unanswered_said:
                continue
            if now - node.first_sent_ns >= UNANSWERED_NS:
                node.unanswered_said = True
                self._unanswered -= 1
                log.warning(
                    "invoseq: the repository at %s took this process's batches for %d s and "
                    "acknowledged none: "
                    "likely no invoseq repository listens there (or one of another protocol "
                    "version), or it cannot store them (see its log); nothing this process "
                    "sends there is stored yet",
                    node.endpoint,
                    UNANSWERED_NS // 1_000_000_000,
                )

    def acked_by_endpoint(self) -> dict[str, int]:
        return {node.endpoint: node.acked_batches for node in self._nodes}

    def close(self) -> None:
        """Close every node's transport, even when closing one fails (the first error is
        raised once all are closed)."""
        error: Exception | None = None
        for node in self._nodes:
            try:
                node.transport.close()
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error

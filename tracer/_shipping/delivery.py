"""Getting encoded batches to the repository exactly once, never blocking, never unbounded: a
window of batches in flight, a bounded memory queue, the spool on disk past it, and resends until
the repository acknowledges each batch after it stored it.

More in docs/architecture.md, "tracer/_shipping/delivery.py".
"""

from __future__ import annotations

import collections
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from invoseq import wire
from tracer._shipping.endpoints import Nodes
from tracer._shipping.spool import Spool
from tracer._shipping.windows import LostWindows, Window

_batch_decoder = msgspec.msgpack.Decoder(wire.Batch)

#: A batch waits at most 2**MAX_BACKOFF times its node's patience before it is sent again.
MAX_BACKOFF = 5

#: Lossy sequences a spool's report slot names at most (the slot holds 4 KiB).
REPORT_LOST_SEQS = 128

#: Builds the report written into the spool's slot: (batch number or None to reserve one, the
#: lossy sequences to name, the windows of those not named) -> (puid, batch number, encoded
#: batch without events).
Reporter = Callable[[int | None, tuple[bytes, ...], tuple[Window, ...]], tuple[int, int, bytes]]

#: Lossy sequences remembered until a batch reports them: 16 batches' worth of reports.
MAX_UNREPORTED = 16 * wire.MAX_LOST_SEQS


@dataclass(slots=True)
class Outgoing:
    puid: int
    batch_no: int
    body: bytes | bytearray  # bytearray: a kept buffer (tracer._shipping.bodies)
    events: int
    reports: tuple[bytes, ...] = ()  # lost sequences this batch reports
    windows: tuple[Window, ...] = ()  # and the windows of drops whose sequences were not named
    #: Sequences whose invocations, started in earlier batches, this batch ends: its End events
    #: carry no sequence id, so a drop names them from here.
    continues: tuple[bytes, ...] = ()
    sent_ns: int = 0
    node: int = 0  # the repository node it was last sent to
    #: Times it was sent again while its node acknowledged other batches: each doubles the wait
    #: before the next resend (``Delivery.pump``).
    backoff: int = 0
    resent: bool = False

    @property
    def key(self) -> tuple[int, int]:
        return self.puid, self.batch_no


@dataclass(slots=True)
class Counters:
    sent_events: int = 0  # events acknowledged by the repository
    dropped_events: int = 0  # events dropped past every bound
    acked_batches: int = 0
    resent_batches: int = 0
    spooled_batches: int = 0
    unnamed_lost_seqs: int = 0  # sequences with dropped events past the bound on names kept


class Delivery:
    def __init__(
        self,
        nodes: Nodes,
        *,
        window: int,
        queue_batches: int,
        spool: Spool | None,
        resend_ns: int,
        on_drop: Callable[[], None] = lambda: None,
        clock: Callable[[], int] = time.monotonic_ns,
        queue_bytes: int = sys.maxsize,
        window_bytes: int = sys.maxsize,
        on_memory: Callable[[int], None] = lambda size: None,
        reporter: Reporter | None = None,
    ) -> None:
        self._reporter = reporter
        self._unwritten_drops = False  # dropped since the spool's report slot was last written
        self._on_drop = on_drop
        self._on_memory = on_memory
        self._queue_bytes = queue_bytes
        self._queued_bytes = 0
        self._nodes = nodes
        self._window_size = window
        self._window_bytes = window_bytes  # at most in flight (one batch however big)
        self._in_flight_bytes = 0
        self._queue_size = queue_batches
        self._spool = spool
        self._resend_ns = resend_ns
        self._clock = clock
        self._window: collections.OrderedDict[tuple[int, int], Outgoing] = collections.OrderedDict()
        self._queue: collections.deque[Outgoing] = collections.deque()
        self._unsendable: Outgoing | None = None  # read from the spool, refused by the transport
        self._unreported: set[bytes] = set()
        #: Of those, the ones a dropped batch cut at its edges: begun in an earlier batch, or
        #: going on in a later one. Part of them is stored, so they are named first where room
        #: is short (the spool's report slot): a sequence dropped whole is not listed anyway.
        self._edges: set[bytes] = set()
        #: The time windows of the drops whose sequences ``_unreported`` names (until it is
        #: empty): the spool's report slot, which names fewer, reports them for the rest.
        self._unreported_windows = LostWindows()
        self._first_drop_ns = 0  # the earliest time of a dropped event (0: none yet)
        self.windows = LostWindows()  # of drops whose sequences could not be named
        self._in_spool: dict[tuple[int, int], int] = {}  # events of batches written, not yet taken
        self.counters = Counters()

    # -- submitting -------------------------------------------------------------------------------

    def lost_to_report(self, limit: int = wire.MAX_LOST_SEQS) -> tuple[bytes, ...]:
        """Sequences with dropped events that no acknowledged batch has reported yet; the caller
        puts them into the batch it is building and passes them to ``submit``."""
        named = sorted(self._edges)[:limit]
        return (*named, *sorted(self._unreported - self._edges)[: limit - len(named)])

    def submit(self, item: Outgoing) -> None:
        self._unreported.difference_update(item.reports)
        self._edges.difference_update(item.reports)
        if not self._unreported:
            self._unreported_windows = LostWindows()
        self.windows.reported(item.windows)
        item.reports = item.windows = ()  # in its body: a drop reads them back (no copies kept)
        self._on_memory(len(item.body))
        while self._queue and (
            len(self._queue) >= self._queue_size
            or self._queued_bytes + len(item.body) > self._queue_bytes
        ):
            self._spill(self._dequeue())
        self._queue.append(item)
        self._queued_bytes += len(item.body)

    def _dequeue(self) -> Outgoing:
        item = self._queue.popleft()
        self._queued_bytes -= len(item.body)
        return item

    def drop_unsent(
        self, events: int, seqs: set[bytes], span: Window, unnamed: Window | None = None
    ) -> None:
        """Events never recorded, because the process's memory bound was reached: counted, and
        their sequences reported as lossy, like a dropped batch's. ``span``: when they were
        left out (since the sender's last take); ``unnamed``: when those whose sequences the
        budget could not name were (``budget.take_overflow``)."""
        self.counters.dropped_events += events
        self._unwritten_drops = True
        self._dropped_at(span)
        self._remember(seqs, span)
        if unnamed is not None:
            self.windows.add(unnamed)

    def _spill(self, item: Outgoing) -> None:
        if self._spool is not None and self._spool.append(
            item.puid, item.batch_no, item.body, item.events
        ):
            self.counters.spooled_batches += 1
            self._in_spool[item.key] = item.events
        else:
            self._drop(item)
        self._on_memory(-len(item.body))

    def _remember(self, seqs: Iterable[bytes], span: Window, *, edges: bool = False) -> None:
        """Sequences to report lossy, whose drops happened within ``span`` (``edges``: cut at a
        dropped batch's edges); past MAX_UNREPORTED names, counted and known by ``span`` alone
        (memory stays bounded while the repository is away for long)."""
        unnamed = named = False
        for seq in seqs:
            if seq in self._unreported:
                if edges:
                    self._edges.add(seq)
                continue
            if len(self._unreported) >= MAX_UNREPORTED:
                self.counters.unnamed_lost_seqs += 1
                unnamed = True
            else:
                self._unreported.add(seq)
                named = True
                if edges:
                    self._edges.add(seq)
        if unnamed:
            self.windows.add(span)
        if named:
            self._unreported_windows.add(span)

    def _dropped_at(self, span: Window) -> None:
        if not self._first_drop_ns or span[0] < self._first_drop_ns:
            self._first_drop_ns = span[0]

    def _drop(self, item: Outgoing) -> None:
        self.counters.dropped_events += item.events
        self._unwritten_drops = True
        self._on_drop()
        try:
            batch = _batch_decoder.decode(item.body)
        except msgspec.DecodeError:  # never seen: the sender encoded it
            now = self._clock()
            self._remember(item.continues, (self._first_drop_ns or now, now), edges=True)
            return
        times = [e.t_ns for c in batch.chunks for e in c.events if not isinstance(e, wire.Attrs)]
        now = self._clock()
        span = (min(times), max(times)) if times else (now, now)
        self._dropped_at(span)
        self._remember(item.continues, span, edges=True)
        # its report is lost with it: report again (when those drops were is not kept: since
        # the first drop of the process, should the names not fit)
        self._remember(batch.lost_seqs, (self._first_drop_ns, span[1]))
        for window in batch.lost_windows:
            self.windows.add((window.first_ns, window.last_ns))
        for chunk in batch.chunks:
            starts = []
            for event in chunk.events:
                if isinstance(event, wire.Start | wire.Handoff):
                    self._remember((event.seq,), span)
                    if isinstance(event, wire.Start):
                        starts.append(event.seq)
            if starts:  # the first may have begun in an earlier batch, the last go on in a later
                self._remember((starts[0], starts[-1]), span, edges=True)

    # -- moving batches ---------------------------------------------------------------------------

    def pump(self) -> None:
        """Resend what waited too long for its acknowledgement, then fill the window.

        A batch is due once it waited ``resend_ns``. If its node acknowledged nothing since it
        was sent, the node is suspect, and the batch goes at once to another node that can take
        it. Otherwise the batch would go back to the node that has it, which helps only if that
        node lost it: a node that acknowledges other batches meanwhile is alive and maybe only
        slow (a repository working through a backlog acknowledges each batch long after it was
        sent), and one that pauses may answer yet. The batch then waits as long as that node's
        acknowledgements take (``Nodes.patience``), doubled at each resend of it, so that a slow
        repository is not sent its backlog again."""
        now = self._clock()
        for waiting in self._window.values():
            waited = now - waiting.sent_ns
            if waited < self._resend_ns:
                continue
            silent = not self._nodes.answered_since(waiting.node, waiting.sent_ns)
            if silent:
                self._nodes.failed(waiting.node)  # suspect
            if not (silent and self._nodes.elsewhere(waiting.node)):
                patience = self._nodes.patience(waiting.node, self._resend_ns)
                if waited < patience << waiting.backoff:
                    continue
                waiting.backoff = min(waiting.backoff + 1, MAX_BACKOFF)
            node = self._nodes.send(waiting.body, moving_from=waiting.node)
            if node is None:
                break
            self._nodes.moved(waiting.node)
            waiting.node = node
            waiting.sent_ns = now
            waiting.resent = True
            self.counters.resent_batches += 1
        while len(self._window) < self._window_size and (
            not self._window or self._in_flight_bytes < self._window_bytes
        ):
            spooled = self._spool is not None and self._spool.peek() is not None
            if self._unsendable is None and spooled:  # the spool holds the oldest batches
                item = self._take_spooled()
                if item is None:
                    return  # refused: try again next round
            else:
                item = self._unsendable or (self._dequeue() if self._queue else None)
                self._unsendable = None
                if item is None:
                    return
                node = self._nodes.send(item.body)
                if node is None:
                    self._unsendable = item  # refused (not connected, queue full): first next time
                    return
                item.node = node
            item.sent_ns = now
            self._window[item.key] = item
            self._in_flight_bytes += len(item.body)

    def write_report(self) -> None:
        """After drops, put the counters and the sequences they cut into the spool's report slot,
        for whoever replays the spool should no later batch reach the repository."""
        spool = self._spool
        if not self._unwritten_drops or spool is None or not spool.reports or not self._reporter:
            return
        lost = self.lost_to_report(REPORT_LOST_SEQS)
        while True:  # fewer names when the process's own metadata (a long argv) takes the room
            windows = self.windows.to_report()
            if len(lost) < len(self._unreported):  # the names left out: by the time of the drops
                both = LostWindows()
                for window in (*windows, *self._unreported_windows.to_report()):
                    both.add(window)
                windows = both.to_report()
            puid, batch_no, body = self._reporter(spool.report_batch_no, lost, windows)
            spool.report_batch_no = batch_no
            if spool.write_report(puid, batch_no, body) or not lost:
                break
            lost = lost[: len(lost) // 2]
        self._unwritten_drops = False

    def _take_spooled(self) -> Outgoing | None:
        """Send the oldest spooled batch; it leaves the spool only once the transport took it."""
        record = self._spool.peek() if self._spool is not None else None
        if record is None:
            return None
        node = self._nodes.send(record.body)
        if node is None:
            return None
        assert self._spool is not None
        self._spool.advance()
        self._in_spool.pop((record.puid, record.batch_no), None)
        self._on_memory(len(record.body))
        return Outgoing(record.puid, record.batch_no, record.body, record.events, node=node)

    @property
    def spool(self) -> Spool | None:
        """The disk spool (None: spooling is off), read for its counters."""
        return self._spool

    def spooled_events(self, puid: int) -> int:
        """Events of process ``puid`` waiting in the spool (after ``retire``: for a later run)."""
        return sum(n for (owner, _), n in self._in_spool.items() if owner == puid)

    def collect(self, timeout_ms: int) -> int:
        """Take the acknowledgements that arrived (waiting up to ``timeout_ms`` for the first)."""
        taken = 0
        acks = self._nodes.receive_acks(timeout_ms)
        now = self._clock() if acks else 0
        for node, ack in acks:
            item = self._window.pop((ack.puid, ack.batch_no), None)
            if item is not None:
                self._in_flight_bytes -= len(item.body)
                if not item.resent and node == item.node:
                    self._nodes.observe(node, now - item.sent_ns)
                self._on_memory(-len(item.body))
                self._nodes.settled(item.node)
                self._nodes[node].acked_batches += 1
                self.counters.acked_batches += 1
                self.counters.sent_events += item.events
                taken += 1
        return taken

    def unacknowledged_events(self) -> int:
        """Events in batches queued or sent and not yet acknowledged (not the spool's), for
        progress; read from another thread, so approximate, and 0 if it keeps changing."""
        for _ in range(3):
            try:
                items = [*self._window.values(), *self._queue]
            except RuntimeError:  # changed while copied: the sender thread is at work
                continue
            unsendable = self._unsendable
            waiting = sum(item.events for item in items)
            return waiting + (unsendable.events if unsendable is not None else 0)
        return 0

    def pending(self) -> bool:
        spooled = self._spool is not None and self._spool.has_records()
        return bool(self._window or self._queue or self._unsendable or spooled)

    def retire(self) -> None:
        """At shutdown, with the time to wait used up: what is not acknowledged goes to the spool
        for the next run of this program, or is dropped and counted."""
        leftovers = [*self._window.values(), *([self._unsendable] if self._unsendable else [])]
        leftovers.extend(self._queue)
        for item in self._window.values():
            self._nodes.settled(item.node)
        self._window.clear()
        self._in_flight_bytes = 0
        self._queue.clear()
        self._queued_bytes = 0
        self._unsendable = None
        for item in leftovers:
            self._spill(item)
        self.write_report()

    @property
    def nodes(self) -> Nodes:
        """The repository nodes, read for their counters."""
        return self._nodes

    def close(self) -> None:
        """Release the transports and the spool; batches still in memory (only when the worker
        failed before ``retire``) are let go, uncounted."""
        held = [*self._window.values(), *self._queue]
        if self._unsendable is not None:
            held.append(self._unsendable)
        self._window.clear()
        self._in_flight_bytes = 0
        self._queue.clear()
        self._unsendable = None
        for item in held:
            self._on_memory(-len(item.body))
        if self._spool is not None:
            self._spool.close()
        self._nodes.close()

"""The background sender: one daemon thread that drains per-thread buffers into numbered batches.

Modelled on OpenTelemetry's BatchProcessor: one worker woken by an Event, a bounded queue (the
transport's), a counter of dropped events, and a thread that never runs traced code. The host
program is never blocked: its threads only append to their own lists; ``flush`` and ``stop`` wait
for the worker at most as long as they are told to. What it sends, batch by batch, is
``batching``'s (a part of ``Sender``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from tracer._core import budget, clock, context, ids, recorder
from tracer._sampling.sampler import Sampler
from tracer._shipping.batching import Batching
from tracer._shipping.bodies import KEEP_BYTES, Bodies
from tracer._shipping.cutting import ThreadSequences
from tracer._shipping.delivery import Delivery
from tracer._shipping.endpoints import Nodes
from tracer._shipping.spool import Spool, program_key
from tracer._shipping.tracer_work import TracerWork
from tracer._shipping.transport import KeyFileError, Transport
from tracer.config import Config

log = logging.getLogger("tracer")

#: While idle (nothing in flight, no thread inside a traced call: ``Sender._idle``), a heartbeat
#: promises the next one this many heartbeat intervals later (protocol: the repository keeps
#: the latest batch's ``heartbeat_ms``), so an idle process wakes its sender once every 10 s by
#: default. The first batch after the idleness promises ``heartbeat_ms`` again.
IDLE_HEARTBEATS: Final = 10


class Sender(Batching):
    """The worker thread (``_run``): it drains and sends every flush interval, answers flushes
    and the stop, and rests while there is nothing to do (``_idle``); its batches are
    ``Batching``'s."""

    def __init__(
        self,
        config: Config,
        transport_factory: Callable[[], Mapping[str, Transport]],
        sampler: Sampler | None = None,
    ) -> None:
        self._config = config
        self._sampler = sampler
        self._frames_sent = 0
        self._transport_factory = transport_factory
        self._identity = ids.identity()
        self._encoder = msgspec.msgpack.Encoder()
        self._bodies = Bodies(
            self._encoder.encode_into,
            budget.hold,
            keep_bytes=min(KEEP_BYTES, config.max_buffered_bytes // 4),
        )
        self._wake = threading.Event()
        #: Waiting for work (docs/architecture.md, "Idle"): a reservation wakes it (``_reserved``).
        self.parked = False
        self.parks = 0  # times it went idle (tests)
        self.rounds = 0  # times its worker woke (tests)
        # Reentrant: a program's own SIGTERM handler calls tracer.flush(), which may interrupt
        # the main thread inside flush() itself (a pool task's flush, say) holding this lock.
        self._lock = threading.RLock()
        self._flush_requests = 0
        self._flushed = threading.Condition(self._lock)
        self._flushes_done = 0
        self._flush_result = False
        #: Until when the worker waits for acknowledgements for the flushes asked so far: each
        #: caller's own timeout (``flush(timeout_s)``), the latest deadline of those waiting.
        self._flush_deadline = 0.0
        #: Threads doing the tracer's work (starting it, waiting in a flush): never sampled.
        self.tracer_work = TracerWork()
        self._stopping = False
        self._final = True
        self._methods_sent = 0
        self._threads_sent: set[int] = set()  # tids whose ThreadInfo went out
        self._thread_seqs = ThreadSequences()
        self._last_send = time.monotonic()
        #: What the batches promise now (``heartbeat_ms``), and what the last one sent promised.
        self._promise_ms = self._promised_ms = config.heartbeat_ms
        #: The repository let a whole flush timeout pass without acknowledging: later flushes do
        #: not wait for it again until it answers (a pool task must not pay the timeout each time).
        self._silent = False
        self._samples: list[Any] = []
        self._overflow_taken_ns = clock.now()  # calls the bound turned away since were counted
        self.delivery: Delivery | None = None
        self._thread = threading.Thread(target=self._run, name="invoseq-sender", daemon=True)

    def start(self) -> None:
        # Started with no context: the sender is never part of the sequence whose first traced
        # call happened to start it (the thread patch would hand that sequence off to it).
        with self.tracer_work.doing(), context.detached():
            self._thread.start()
            budget.on_threads_full = self._wake.set  # drain early when the threads hold much
            budget.on_reserved = self._reserved  # the end of idleness: see _idle
            if self._sampler is not None:
                self._sampler.start()

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def _reserved(self) -> None:
        """A thread reserved allowance for a Start (``budget.on_reserved``): what waits for work
        works again. Reservations are rare (once per thousands of calls of a busy thread)."""
        if self.parked:
            self._wake.set()
        if self._sampler is not None:
            self._sampler.wake()

    def flush(self, timeout_s: float) -> bool:
        """Send everything buffered so far and wait (bounded) for its acknowledgement."""
        with self.tracer_work.doing():
            return self._flush(timeout_s)

    def _flush(self, timeout_s: float) -> bool:
        with self._lock:
            if self._stopping or not self._thread.is_alive():
                return False
            # A flush still waiting keeps its own deadline; one already done keeps none.
            outstanding = self._flush_requests > self._flushes_done
            self._flush_requests += 1
            wanted = self._flush_requests
            deadline = time.monotonic() + timeout_s
            self._flush_deadline = max(self._flush_deadline, deadline) if outstanding else deadline
        self._wake.set()
        with self._flushed:
            return (
                self._flushed.wait_for(lambda: self._flushes_done >= wanted, timeout_s)
                and self._flush_result
            )

    def stop(self, timeout_s: float, *, final: bool = True) -> bool:
        """Send everything left, wait for acknowledgements, close the socket. ``final`` marks the
        last batch as the process's last (shutdown); a sender replaced by ``configure()`` is not.
        True when every batch this sender sent was acknowledged."""
        if self._sampler is not None:
            self._sampler.stop(timeout_s)  # its last samples go out with the last batch
        with self._lock:
            self._stopping = True
            self._final = final
            # It waits no longer than it was told, whatever a flush asked before.
            self._flush_deadline = time.monotonic() + timeout_s
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s + 1.0)
        return not self._thread.is_alive() and self._flush_result

    # -- the worker thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            delivery = self.delivery = self._open_delivery()
        except KeyFileError as exc:  # the user's to fix, and no tracer error: one line
            endpoint = self._config.endpoint
            log.error("invoseq: %s; nothing is sent to %s", exc, endpoint)  # noqa: TRY400 (no traceback)
            return
        except Exception as exc:
            log.exception("invoseq: cannot open the transport to %s", self._config.endpoint)
            recorder.internal_error(exc)
            return
        interval = self._config.flush_interval_ms / 1000
        heartbeat = self._config.heartbeat_ms / 1000
        idle = False
        try:
            while True:
                self._wait(idle, interval, heartbeat)
                self._wake.clear()
                self.rounds += 1
                with self._lock:
                    stopping = self._stopping
                    final = stopping and self._final
                    requested = self._flush_requests
                    deadline = self._flush_deadline
                silent = time.monotonic() - self._last_send
                alive = heartbeat > 0 and silent >= min(heartbeat, self._promised_ms / 1000)
                self._send_buffered(delivery, final=final, heartbeat=alive)
                self._move(delivery)
                if stopping or requested > self._flushes_done:
                    result = self._await_delivery(delivery, deadline)
                    with self._flushed:
                        self._flush_result = result
                        self._flushes_done = requested
                        self._flushed.notify_all()
                if stopping:
                    delivery.retire()
                    return
                idle = self._idle(delivery, requested)
        except Exception as exc:
            recorder.internal_error(exc)
        finally:
            with self._flushed:
                self._flushes_done = self._flush_requests
                self._flushed.notify_all()
            try:
                delivery.close()
            except Exception as exc:
                recorder.internal_error(exc)
            self._bodies.release()  # what the pool held of the memory bound goes back

    def _move(self, delivery: Delivery) -> None:
        """One round of delivery: the acknowledgements that arrived while this thread did not
        run first (a batch is overdue, and its node silent, only if they do not include it: a
        busy program may keep the worker from running for longer than the resend timeout), then
        resend and fill the window, take what that brought, and put any drops in the spool."""
        if delivery.collect(0):
            self._silent = False
        delivery.pump()
        if delivery.collect(0):
            self._silent = False
        delivery.write_report()

    def _wait(self, idle: bool, interval: float, heartbeat: float) -> None:
        """Wait for the flush interval, or, idle, until a thread records again or the promised
        heartbeat is due; a heartbeat sent while idle promises a longer wait (IDLE_HEARTBEATS)."""
        promise = self._config.heartbeat_ms
        if idle:
            left = self._last_send + self._promised_ms / 1000 - time.monotonic()
            self._wake.wait(max(0.0, left) if heartbeat else None)
            self.parked = False
            if not self._wake.is_set():  # the heartbeat alone
                promise = min(3_600_000, IDLE_HEARTBEATS * promise)
            elif not self._urgent():  # a thread records again: drained a flush interval on
                self._wake.clear()
                idle = False
        if not idle:
            self._wake.wait(min(interval, heartbeat) if heartbeat else interval)
        self._promise_ms = promise

    def _urgent(self) -> bool:
        """A flush or the stop waits for the worker (rather than a thread's first events)."""
        with self._lock:
            return self._stopping or self._flush_requests > self._flushes_done

    def _idle(self, delivery: Delivery, requested: int) -> bool:
        """Whether to wait for work rather than look again after the flush interval: nothing to
        send or to wait for, no thread inside a traced call (the sampler waits for work too), no
        memory a drain would still give back (``recorder.IDLE_TRIM_S``) and every thread's
        allowance spent, so that any thread's next traced call reserves more and wakes it
        (``_reserved``). It still sends a heartbeat when the last batch promised one
        (the repository would take the process for lost), and what the waiting left in a buffer
        (the End of a call in flight, when there is no sampler to see it) goes with it."""
        if delivery.pending() or self._samples:
            return False
        with self._lock:
            if self._stopping or self._flush_requests != requested:
                return False
        if self._sampler is not None and not self._sampler.parked:
            return False
        if recorder.holds_idle_memory():  # a drain or a few more gives it back first
            return False
        self.parked = True  # from here a reservation sets _wake: none is missed
        if recorder.all_spent():
            self.parks += 1
            self._bodies.release()  # nothing is pending: every body is done with
            return True
        self.parked = False
        return False

    def _open_delivery(self) -> Delivery:
        config = self._config
        spool = None
        if config.spool_bytes > 0:
            spool = Spool(
                config.spool_dir, config.spool_bytes, program_key(list(self._identity.argv))
            )
            spool.adopt_orphans()
        return Delivery(
            Nodes(self._transport_factory()),  # endpoint -> transport, one per repository node
            window=config.max_inflight_batches,
            queue_batches=config.queue_batches,
            spool=spool,
            resend_ns=config.resend_ms * 1_000_000,
            on_drop=self._forget_sent_infos,
            # Encoded batches count against the process's memory bound; queued ones may take
            # half of it, past which the oldest go to the spool, and those in flight a quarter,
            # so the threads keep recording.
            queue_bytes=config.max_buffered_bytes // 2,
            window_bytes=config.max_buffered_bytes // 4,  # the threads' buffers keep the rest
            on_memory=budget.hold,
            reporter=self._report,
        )

    def _await_delivery(self, delivery: Delivery, deadline: float) -> bool:
        """Wait until everything is acknowledged, at most until ``deadline`` (the latest of the
        waiting callers' own timeouts), and not at all while the repository is known to be
        silent. The repository is silent when a whole wait passed without one acknowledgement:
        a repository that acknowledges, however slowly, is not (the next flush waits for it)."""
        if self._silent:
            deadline = 0.0
        answered = False
        while delivery.pending():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                answered = delivery.collect(0) > 0 or answered
                self._silent = delivery.pending() and not answered
                return not delivery.pending()
            delivery.pump()
            if delivery.collect(max(1, min(50, int(remaining * 1000)))):
                answered = True
                self._silent = False
        return True

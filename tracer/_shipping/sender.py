"""The background sender: one daemon thread that drains per-thread buffers into numbered batches.

Modelled on OpenTelemetry's BatchProcessor: one worker woken by an Event, a bounded queue (the
transport's), a counter of dropped events, and a thread that never runs traced code. The host
program is never blocked: its threads only append to their own lists; ``flush`` and ``stop`` wait
for the worker at most as long as they are told to.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from invoseq import wire
from tracer._core import budget, clock, context, ids, recorder
from tracer._sampling.sampler import Sampler
from tracer._shipping.bodies import KEEP_BYTES, Bodies
from tracer._shipping.cutting import ThreadSequences, halves
from tracer._shipping.delivery import Delivery, Outgoing
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


class Sender:
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

    def _report(
        self, batch_no: int | None, lost: tuple[bytes, ...], windows: tuple[tuple[int, int], ...]
    ) -> tuple[int, int, bytes]:
        """The batch the spool's report slot holds: no events, the drop count and the sequences
        the drops cut (the windows of those not named), under a batch number of its own
        (reserved once per spool file)."""
        assert self.delivery is not None
        if batch_no is None:
            batch_no = recorder.next_batch_no()
        batch = wire.batch_layout(
            puid=self._identity.puid,
            batch_no=batch_no,
            process=self._process_layout(),
            methods=[],
            threads=[],
            chunks=[],
            dropped=self.delivery.counters.dropped_events,
            lost_seqs=lost,
            lost_windows=windows,
        )
        return self._identity.puid, batch_no, self._encoder.encode(batch)

    def _process_layout(self) -> tuple[Any, ...]:
        process = self._identity
        return wire.process_layout(
            pid=process.pid,
            host=process.host,
            platform_id=process.platform_id,
            clock_offset_ns=process.clock_offset_ns,
            started_ns=process.started_ns,
            argv=process.argv,
            heartbeat_ms=self._promise_ms,
        )

    def _forget_sent_infos(self) -> None:
        """A dropped batch may have carried metadata: send it all again with the next batch."""
        self._methods_sent = self._frames_sent = 0
        self._threads_sent.clear()

    def _send_buffered(self, delivery: Delivery, *, final: bool, heartbeat: bool = False) -> None:
        """Send what the threads recorded; with nothing to send, an empty batch still goes out
        when it is the final one or a heartbeat is due (the repository learns the process lives)."""
        drained = recorder.drain()  # the sender now holds their charge under the memory bound
        try:
            self._send_drained(delivery, drained, final=final, heartbeat=heartbeat)
        finally:  # encoded into batches, which count as they are submitted: let the events go
            budget.hold(-drained.events * budget.EVENT_BYTES)

    def _send_drained(
        self, delivery: Delivery, drained: recorder.Drained, *, final: bool, heartbeat: bool
    ) -> None:
        skipped, lost, unnamed = budget.take_overflow()
        taken_ns, self._overflow_taken_ns = self._overflow_taken_ns, clock.now()
        if skipped:
            delivery.drop_unsent(skipped, lost, (taken_ns, self._overflow_taken_ns), unnamed)
        self._samples = self._sampler.drain() if self._sampler is not None else []
        limit = self._config.batch_events
        pending: list[tuple[recorder.ThreadBuffer, recorder.Events]] = []
        size = 0
        for buffer, events in drained.chunks:
            start = 0
            while start < len(events):
                part = events[start : start + limit - size]
                pending.append((buffer, part))
                size += len(part)
                start += len(part)
                if size >= limit:
                    self._send_batch(delivery, pending, size, final=False)
                    pending, size = [], 0
        if pending or final or self._samples or (heartbeat and not drained.chunks):
            self._send_batch(delivery, pending, size, final=final)
        for buffer in drained.finished:  # they send nothing more: forget them
            self._threads_sent.discard(buffer.tid)
            self._thread_seqs.forget(buffer.tid)

    def _send_batch(
        self,
        delivery: Delivery,
        chunks: list[tuple[recorder.ThreadBuffer, recorder.Events]],
        size: int,
        *,
        final: bool,
    ) -> None:
        # Methods are gathered after draining: every event drained was recorded after its method
        # was interned. A thread's info goes with the first of its chunks this sender sends.
        methods = recorder.methods_since(self._methods_sent)
        samples, self._samples = self._samples, []  # they ride with the cycle's first batch
        frames = recorder.frames_since(self._frames_sent) if samples else []
        sampler = self._sampler.report() if self._sampler is not None else None
        threads = list(
            {b.tid: b.info for b, _ in chunks if b.tid not in self._threads_sent}.values()
        )
        process = self._identity
        batch_no = recorder.next_batch_no()  # per process: never reused by a later sender
        lost = delivery.lost_to_report()
        windows = delivery.windows.to_report()
        batch = wire.batch_layout(
            puid=process.puid,
            batch_no=batch_no,
            process=self._process_layout(),
            methods=methods,
            threads=threads,
            chunks=[(buffer.tid, recorder.encodable(events)) for buffer, events in chunks],
            dropped=delivery.counters.dropped_events,
            final=final,
            frames=frames,
            samples=samples,
            sampler=sampler,
            lost_seqs=lost,
            lost_windows=windows,
        )
        body = self._bodies.encode(batch)  # the program's tracemalloc does not see it
        if len(body) > wire.MAX_FRAME_BYTES and size > 1:  # big attributes: the repository's limit
            self._samples = samples  # they ride with the first half (its number is left unused)
            first, second = halves(chunks, size)
            self._send_batch(delivery, first, size // 2, final=False)
            self._send_batch(delivery, second, size - size // 2, final=final)
            return
        continues = self._thread_seqs.continued(chunks)
        delivery.submit(Outgoing(process.puid, batch_no, body, size, lost, windows, continues))
        self._last_send = time.monotonic()
        self._promised_ms = self._promise_ms
        self._methods_sent += len(methods)
        self._frames_sent += len(frames)
        self._threads_sent.update(info[0] for info in threads)

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

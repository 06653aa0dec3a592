"""What the sender's worker sends: the events the threads recorded, drained into numbered batches
of at most ``batch_events`` events (with the methods, threads and frames not sent before, and the
sampler's samples), encoded, cut in halves when too big for a frame, and submitted for delivery;
and the batch the spool's report slot holds. Part of ``Sender`` (``sender.py``), whose state it
keeps.

More in docs/architecture.md, "Batch size and the GIL".
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from invoseq import wire
from tracer._core import budget, clock, ids, recorder
from tracer._sampling.sampler import Sampler
from tracer._shipping.bodies import Bodies
from tracer._shipping.cutting import ThreadSequences, halves
from tracer._shipping.delivery import Delivery, Outgoing
from tracer.config import Config


class Batching:
    """The sender's batches, a part of ``Sender``: ``_send_buffered`` sends what the threads
    recorded, ``_report`` makes the spool's report batch. The attributes below are ``Sender``'s."""

    _config: Config
    _sampler: Sampler | None
    _identity: ids.ProcessIdentity
    _encoder: msgspec.msgpack.Encoder
    _bodies: Bodies
    _promise_ms: int
    _promised_ms: int
    _methods_sent: int
    _frames_sent: int
    _threads_sent: set[int]
    _thread_seqs: ThreadSequences
    _samples: list[Any]
    _overflow_taken_ns: int
    _last_send: float
    delivery: Delivery | None

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

"""One sequence's raw records in one file, to move it from one repository to another.

``cmr export SEQ --format bundle`` writes what the repository holds for a sequence — its
invocations, hand-offs, samples (and its sampler's gaps), the methods, threads, frames and processes
they refer to, and which processes dropped some of its events (``lost_seqs``, so it stays lossy) —
as the wire batches a traced process would have sent: one process's records per batch (split when
large), wall-clock times with a clock offset of 0, the last batch ``final`` when the process ended,
and next to each batch the time the repository received the process's latest batch
(``last_seen_ns``), so an imported process is alive, ended or lost exactly as it was. ``cmr import``
feeds those batches to ``Store.ingest``, the path every network batch takes, so a bundle is decoded
with the wire's types and size limits and a hostile one is refused with one line. Batch numbers are
derived from the batch's content: importing a bundle twice, or a bundle of data the repository
already has, stores nothing new.

File layout (``docs/protocol.md``, "Bundle file"): the 8-byte magic ``IVSQBNDL``, the bundle
format version (1 byte), the wire protocol version of the batches (1 byte), then the zlib stream
of the msgpack ``Body``.
"""

from __future__ import annotations

import hashlib
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Final, TypeVar

import msgspec

from cmr.store._samples import tick_offsets
from cmr.store.base import InvocationRecord, SequenceData, Store
from invoseq import wire

MAGIC: Final = b"IVSQBNDL"
BUNDLE_VERSION: Final = 1
HEADER: Final = MAGIC + bytes((BUNDLE_VERSION, wire.PROTOCOL_VERSION))
#: The largest body (decompressed) an import accepts: a guard against a decompression bomb.
MAX_BODY_BYTES: Final = 1 << 30
#: Events, samples or interned records per batch: a batch stays well inside the wire's limits.
BATCH_ITEMS: Final = 20_000
#: Bundle batch numbers have this bit set, so they never meet the small numbers a sender counts.
_BATCH_NO_MARK: Final = 1 << 62

_T = TypeVar("_T")


class BundleError(Exception):
    """A file that is not a bundle this repository can import (a one-line reason)."""


class Entry(msgspec.Struct, array_like=True, frozen=True):
    """A batch, and when the source repository last heard from its process."""

    received_ns: wire.I64
    batch: wire.Batch


class Body(msgspec.Struct, array_like=True, frozen=True):
    seq: wire.SeqId
    exported_ns: wire.I64
    exporter: wire.Name
    entries: Annotated[list[Entry], msgspec.Meta(max_length=wire.MAX_CHUNKS_PER_BATCH)]


@dataclass(frozen=True, slots=True)
class ImportResult:
    seq: bytes
    batches: int  # in the bundle
    stored: int  # of them new to the repository
    processes: int


def bundle_batches(data: SequenceData) -> list[Entry]:
    """The sequence's records as wire batches, one process after the other, in a stable order."""
    entries: list[Entry] = []
    puids = set(data.processes)
    puids.update(record.puid for record in data.invocations)
    puids.update(handoff.puid for handoff in data.handoffs.values())
    for puid in sorted(puids):
        entries.extend(_process_batches(data, puid))
    return entries


def write_bundle(data: SequenceData, *, exported_ns: int | None = None) -> bytes:
    body = Body(
        seq=data.seq,
        exported_ns=time.time_ns() if exported_ns is None else exported_ns,
        exporter="invoseq cmr",
        entries=bundle_batches(data),
    )
    return HEADER + zlib.compress(msgspec.msgpack.encode(body))


def read_bundle(blob: bytes, *, max_body_bytes: int = MAX_BODY_BYTES) -> Body:
    """Check and decode a bundle. Raises BundleError with a one-line reason."""
    if not blob.startswith(MAGIC) or len(blob) < len(HEADER):
        raise BundleError("not an invoseq bundle (made by 'cmr export --format bundle')")
    version, protocol = blob[len(MAGIC)], blob[len(MAGIC) + 1]
    if version != BUNDLE_VERSION:
        raise BundleError(
            f"bundle format version {version}; this invoseq reads version {BUNDLE_VERSION}"
        )
    if protocol != wire.PROTOCOL_VERSION:
        raise BundleError(
            f"the bundle holds protocol {protocol} batches; this invoseq reads protocol "
            f"{wire.PROTOCOL_VERSION}"
        )
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(blob[len(HEADER) :], max_body_bytes)
    except zlib.error:
        raise BundleError("the bundle is corrupt: its compressed data is damaged") from None
    if not inflate.eof:
        if len(raw) >= max_body_bytes:
            raise BundleError(f"the bundle is larger than {max_body_bytes} bytes uncompressed")
        raise BundleError("the bundle is truncated")
    if inflate.unused_data:
        raise BundleError("the bundle is corrupt: bytes follow its compressed data")
    try:
        body = msgspec.msgpack.decode(raw, type=Body)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # (ValidationError is one too)
        raise BundleError(f"the bundle is corrupt: {_first_line(exc)}") from None
    _check(body)
    return body


def import_bundle(
    store: Store, body: Body, *, on_batch: Callable[[int], None] | None = None
) -> ImportResult:
    """Store every batch of a bundle ``read_bundle`` checked (only those the store did not
    have). Checking the whole bundle first means a refused one leaves the repository as it was.
    ``on_batch(n)`` after each batch: n of ``len(body.entries)`` are done (progress)."""
    stored = 0
    for done, entry in enumerate(body.entries, 1):
        stored += store.ingest(entry.batch, entry.received_ns)
        if on_batch is not None:
            on_batch(done)
    processes = len({entry.batch.puid for entry in body.entries})
    return ImportResult(body.seq, len(body.entries), stored, processes)


def _check(body: Body) -> None:
    """What typed decoding cannot say: one sequence, and wall-clock times as exported (offset 0,
    so no time can overflow when a store adds the offset)."""
    if not body.entries:
        raise BundleError("the bundle holds no batches")
    for entry in body.entries:
        batch = entry.batch
        if any(seq != body.seq for seq in batch.lost_seqs):
            raise BundleError(f"the bundle of {body.seq.hex()} marks another sequence lossy")
        if batch.process.clock_offset_ns != 0:
            raise BundleError(
                f"batch {batch.batch_no:x} has a clock offset: bundles hold wall times"
            )
        for chunk in batch.chunks:
            for event in chunk.events:
                if isinstance(event, wire.Start | wire.Handoff) and event.seq != body.seq:
                    raise BundleError(
                        f"the bundle of {body.seq.hex()} holds events of another sequence"
                    )


def _process_batches(data: SequenceData, puid: int) -> Iterator[Entry]:
    process = data.processes.get(puid)
    invocations = [r for r in data.invocations if r.puid == puid]
    events = _events(data, puid, invocations)
    samples = [
        wire.Sample(
            s.tid,
            s.t_ns,
            s.weight,
            s.duration_ns,
            s.cpu_ns,
            list(s.frames),
            list(s.lines),
            *tick_offsets(s),
        )
        for s in sorted([*data.samples, *data.gaps], key=lambda s: (s.t_ns, s.tid))
        if s.puid == puid
    ]
    methods = [
        wire.MethodInfo(method, m.module, m.qualname, m.file, m.line)
        for (owner, method), m in sorted(data.methods.items())
        if owner == puid
    ]
    threads = [
        wire.ThreadInfo(tid, t.native_id, t.name)
        for (owner, tid), t in sorted(data.threads.items())
        if owner == puid
    ]
    frames = [
        wire.FrameInfo(frame, f.file, f.function, f.line)
        for (owner, frame), f in sorted(data.frames.items())
        if owner == puid
    ]
    times = [t for _, t, _ in events] + [s.t_ns for s in samples]
    info = wire.ProcessInfo(
        pid=process.pid if process else 0,
        host=process.host if process else "",
        platform_id=process.platform_id if process else "",
        clock_offset_ns=0,
        started_ns=min(times, default=0),  # not kept by the repository: the earliest known
        argv=list(process.argv) if process else [],
        heartbeat_ms=process.heartbeat_ms if process else 0,
    )
    received_ns = process.last_seen_ns if process else 0
    count = max(1, *(_slices(len(items)) for items in (events, samples, methods, threads, frames)))
    for index in range(count):
        batch = wire.Batch(
            puid=puid,
            batch_no=0,
            process=info,
            methods=_part(methods, index),
            threads=_part(threads, index),
            chunks=_chunks(_part(events, index)),
            dropped=process.dropped if process else 0,
            final=bool(process and process.ended) and index == count - 1,
            frames=_part(frames, index),
            samples=_part(samples, index),
            lost_seqs=[data.seq] if puid in data.lost_by and index == 0 else [],
        )
        yield Entry(received_ns, msgspec.structs.replace(batch, batch_no=_batch_no(batch)))


#: (tid, time, event): a process's events with the thread that recorded them.
_Event = tuple[int, int, wire.Event]


def _events(data: SequenceData, puid: int, invocations: list[InvocationRecord]) -> list[_Event]:
    """Starts, ends and hand-offs in time order. A hand-off's thread is not kept: it goes in the
    chunk of the call that submitted it (the repository files hand-offs by ``hid`` alone)."""
    seq = data.seq
    tid_of = {r.iid: r.tid for r in invocations}
    events: list[tuple[int, int, int, int, wire.Event]] = []
    for r in invocations:
        events.append(
            (
                r.start_ns,
                0,
                r.iid,
                r.tid,
                wire.Start(r.iid, r.parent, r.hid, r.method, r.start_ns, seq),
            )
        )
        if r.end_ns is not None:
            end: wire.Event = (
                wire.End(r.iid, r.end_ns)
                if r.error is None
                else wire.Error(r.iid, r.end_ns, r.error)
            )
            events.append((r.end_ns, 2, r.iid, r.tid, end))
    for h in sorted(data.handoffs.values(), key=lambda h: h.hid):
        if h.puid == puid:
            handoff = wire.Handoff(h.hid, h.parent, h.kind, h.method, h.submitted_ns, seq)
            events.append((h.submitted_ns, 1, h.hid, tid_of.get(h.parent, 0), handoff))
    events.sort(key=lambda e: e[:3])
    return [(tid, t, event) for t, _, _, tid, event in events]


def _chunks(events: list[_Event]) -> list[wire.ThreadChunk]:
    by_tid: dict[int, list[wire.Event]] = {}
    for tid, _, event in events:
        by_tid.setdefault(tid, []).append(event)
    return [wire.ThreadChunk(tid, chunk) for tid, chunk in sorted(by_tid.items())]


def _slices(count: int) -> int:
    return -(-count // BATCH_ITEMS)


def _part(items: Sequence[_T], index: int) -> list[_T]:
    return list(items[index * BATCH_ITEMS : (index + 1) * BATCH_ITEMS])


def _batch_no(batch: wire.Batch) -> int:
    """A number from the batch's content: the same records always get the same number."""
    digest = hashlib.blake2b(msgspec.msgpack.encode(batch), digest_size=8).digest()
    return _BATCH_NO_MARK | (int.from_bytes(digest, "big") & (_BATCH_NO_MARK - 1))


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

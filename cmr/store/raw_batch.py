"""A batch decoded with its thread chunks' events left as msgpack, for the C pass to read.

The repository decodes every batch with msgspec's typed decoder (``wire.Batch``), and with the C
accelerator the index pass (``_pack.c``'s ``scan_batch``) then reads the same events again from
the batch's bytes: the Starts and Ends msgspec made into objects were only checked and freed
(a ten-call request's batch: a fifth of the repository's CPU, issue 33). A ``RawBatch`` is the
same message decoded by the same typed decoder, every field checked as ``wire.Batch`` checks it
(limits included), but each chunk's events kept as ``msgspec.Raw``; the C pass holds the Starts
and Ends to the protocol's types itself (their lengths, integer kinds and ranges, ids not
negative, a 16-byte sequence id, at most ``MAX_EVENTS_PER_CHUNK`` to a chunk), and a chunk that
holds a rarer event (an Error, a Handoff, Attrs) is decoded typed when Python reads it
(``events``). What the C pass cannot read is decoded typed whole (``typed``): anything msgspec
refuses is refused (``InvalidBatchError``), and anything it accepts is stored as before.

Used only where it pays: a store that packs batches, with the C accelerator
(``cmr.server.ingest``); otherwise batches are decoded as ``wire.Batch``.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from cmr.store.base import InvalidBatchError
from invoseq.wire import (
    MAX_CHUNKS_PER_BATCH,
    MAX_EVENTS_PER_CHUNK,
    MAX_INFOS_PER_BATCH,
    MAX_LOST_SEQS,
    MAX_LOST_WINDOWS,
    MAX_SAMPLES_PER_BATCH,
    Batch,
    Event,
    FrameInfo,
    Id63,
    LostWindow,
    MethodInfo,
    ProcessInfo,
    Sample,
    SamplerReport,
    SeqId,
    ThreadChunk,
    ThreadInfo,
)


class RawChunk(msgspec.Struct, array_like=True, frozen=True):
    """``wire.ThreadChunk`` with its events as they came."""

    tid: Id63
    events: msgspec.Raw


class RawBatch(msgspec.Struct, array_like=True, frozen=True):
    """``wire.Batch`` with its chunks' events as they came (``tests`` hold the two alike)."""

    puid: Id63
    batch_no: Id63
    process: ProcessInfo
    methods: Annotated[list[MethodInfo], msgspec.Meta(max_length=MAX_INFOS_PER_BATCH)]
    threads: Annotated[list[ThreadInfo], msgspec.Meta(max_length=MAX_INFOS_PER_BATCH)]
    chunks: Annotated[list[RawChunk], msgspec.Meta(max_length=MAX_CHUNKS_PER_BATCH)]
    dropped: Id63 = 0
    final: bool = False
    frames: Annotated[list[FrameInfo], msgspec.Meta(max_length=MAX_INFOS_PER_BATCH)] = []
    samples: Annotated[list[Sample], msgspec.Meta(max_length=MAX_SAMPLES_PER_BATCH)] = []
    sampler: SamplerReport | None = None
    lost_seqs: Annotated[list[SeqId], msgspec.Meta(max_length=MAX_LOST_SEQS)] = []
    lost_windows: Annotated[list[LostWindow], msgspec.Meta(max_length=MAX_LOST_WINDOWS)] = []


_decode_events: Final = msgspec.msgpack.Decoder(
    Annotated[list[Event], msgspec.Meta(max_length=MAX_EVENTS_PER_CHUNK)]
).decode
_FIELDS: Final = Batch.__struct_fields__


def header(batch: RawBatch, chunks: list[ThreadChunk] | None = None) -> Batch:
    """``batch`` as a ``wire.Batch`` with ``chunks`` (none by default)."""
    fields = dict(zip(_FIELDS, msgspec.structs.astuple(batch), strict=True))
    fields["chunks"] = [] if chunks is None else chunks
    return Batch(**fields)


def events(chunk: RawChunk, batch: RawBatch) -> list[Event]:
    """The chunk's events, decoded typed. Raises InvalidBatchError when msgspec refuses them."""
    try:
        return _decode_events(chunk.events)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise _refused(batch, exc) from None


def typed(batch: RawBatch) -> Batch:
    """``batch`` decoded as ``wire.Batch`` would have been. Raises InvalidBatchError when msgspec
    refuses one of its chunks' events."""
    chunks = [ThreadChunk(chunk.tid, events(chunk, batch)) for chunk in batch.chunks]
    return header(batch, chunks)


def _refused(batch: RawBatch, exc: Exception) -> InvalidBatchError:
    return InvalidBatchError(f"batch {batch.batch_no} of process {batch.puid:x}: {exc}")

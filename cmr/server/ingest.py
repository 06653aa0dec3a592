"""From untrusted frames to a stored batch and its acknowledgement.

Every frame comes from the network, so each check below has a named reason: the frame is counted
under it (``cmr stats`` shows the counts) and dropped, and nothing a peer sends can raise out of
``Ingest.handle``. A batch is acknowledged only once the store has it (or already had it), so a
sender that hears no ack keeps the batch and sends it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

import msgspec

from cmr.gc_paused import paused_gc
from cmr.store import InvalidBatchError, Store
from cmr.store.accel import accelerator
from cmr.store.base import Outcome
from cmr.store.batch_index import PackingStore, Preparation
from cmr.store.raw_batch import RawBatch
from invoseq import wire

log = logging.getLogger(__name__)

_Decoded = TypeVar("_Decoded")

#: A frame larger than the server's limit.
OVERSIZED: Final = "oversized"
#: The first frame is not an invoseq header.
GARBAGE: Final = "garbage"
#: An invoseq header of another protocol version.
VERSION: Final = "version"
#: An invoseq header of a message the repository does not accept (only batches are).
KIND: Final = "kind"
#: Not exactly two frames (header, body).
FRAMES: Final = "frames"
#: The body is not a valid Batch: malformed msgpack, wrong types, limits exceeded, or event times
#: that overflow once converted to wall-clock time.
DECODE: Final = "decode"
#: The store failed (disk full, database locked...): the batch is not acknowledged.
STORE: Final = "store"
#: A CURVE handshake the server refused (a key not allowed, or no CURVE): counted by the server
#: from its socket monitor, since such a client never gets a frame through.
AUTH: Final = "auth"
REASONS: Final = (OVERSIZED, GARBAGE, VERSION, KIND, FRAMES, DECODE, STORE, AUTH)

_HEADER_LEN: Final = len(wire.BATCH_HEADER)
_MAGIC_LEN: Final = len(wire.MAGIC)


class Ingest:
    """Checks, decodes and stores batches; reusable for any transport that delivers frames."""

    def __init__(
        self,
        store: Store,
        *,
        max_frame_bytes: int = wire.MAX_FRAME_BYTES,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._store = store
        self._max_frame_bytes = max_frame_bytes
        self._clock = clock
        self._decode = msgspec.msgpack.Decoder(wire.Batch).decode
        # A packing store's batches with the C pass: their chunks' events left as msgpack for the
        # pass to read, not decoded into objects only to be checked and freed (raw_batch).
        self._decode_packing: Callable[[bytes], wire.Batch | RawBatch] = (
            self._decode if accelerator is None else msgspec.msgpack.Decoder(RawBatch).decode
        )

    def handle(self, frames: Sequence[bytes]) -> wire.Ack | None:
        """Store the batch in ``frames`` ([header, body], without the ROUTER identity).

        Returns the Ack to send back (also for a batch already stored), or None when the frames
        were rejected or the store failed. Never raises."""
        return self.handle_many([frames])[0]

    def handle_many(self, messages: Sequence[Sequence[bytes]]) -> list[wire.Ack | None]:
        """``handle`` for several messages, their batches stored in one transaction (a group
        commit: one commit's cost shared by the batches that were waiting). Returns an Ack or
        None for each message, in order; a store failure acknowledges none of them (each
        sender sends its batch again). Never raises.

        A store that writes packed batches (``PackingStore``) gets each batch packed as soon as
        it is decoded, and its decoded events dropped before the next is decoded. The cyclic
        collector waits meanwhile: nothing here makes a cycle, and a collection in the middle
        would scan every object of the group still alive."""
        acks: list[wire.Ack | None] = [None] * len(messages)
        keys: list[tuple[int, int, int]] = []  # position, puid, batch_no of each batch decoded
        with paused_gc():
            try:
                outcomes = self._store_group(messages, keys)
            except Exception:
                self._failed(keys)
                return acks
        for (position, puid, batch_no), outcome in zip(keys, outcomes, strict=True):
            if isinstance(outcome, InvalidBatchError):
                log.debug("rejected a batch: %s", outcome)
                self.reject(DECODE)
            else:
                acks[position] = wire.Ack(puid, batch_no)
        return acks

    def _failed(self, keys: list[tuple[int, int, int]]) -> None:
        """The store failed the group whose batches have ``keys``: logged and counted."""
        if keys:
            _position, puid, batch_no = keys[0]
            more = len(keys) - 1
            also = f" and {more} more in its group" if more else ""
            log.exception("cannot store batch %d of process %x%s", batch_no, puid, also)
        else:
            log.exception("cannot store a group of batches")
        self.reject(STORE, max(1, len(keys)))

    def _store_group(
        self, messages: Sequence[Sequence[bytes]], keys: list[tuple[int, int, int]]
    ) -> list[Outcome]:
        """Decode the batches of ``messages`` (their keys appended to ``keys``) and store them;
        the store's outcome for each. Raises what the store raises."""
        store = self._store
        if isinstance(store, PackingStore):
            group = Preparation()
            for position, frames in enumerate(messages):
                self._prepare(group, position, frames, keys)
            return store.ingest_prepared(group, self._clock()) if keys else []
        batches: list[wire.Batch] = []
        for position, frames in enumerate(messages):
            batch = self._decoded(frames, self._decode)
            if batch is not None:
                batches.append(batch)
                keys.append((position, batch.puid, batch.batch_no))
        if not batches:
            return []
        bodies = [messages[position][1] for position, _puid, _batch_no in keys]
        return store.ingest_many(batches, self._clock(), bodies)

    def _prepare(
        self,
        group: Preparation,
        position: int,
        frames: Sequence[bytes],
        keys: list[tuple[int, int, int]],
    ) -> None:
        """Decode one message's batch into ``group``; the decoded batch is freed on return."""
        batch = self._decoded(frames, self._decode_packing)
        if batch is not None:
            group.add(batch, frames[1])
            keys.append((position, batch.puid, batch.batch_no))

    def _decoded(
        self, frames: Sequence[bytes], decode: Callable[[bytes], _Decoded]
    ) -> _Decoded | None:
        """The batch in ``frames`` as ``decode`` makes it, or None when they are rejected (and
        counted)."""
        reason = self._check(frames)
        if reason is not None:
            self.reject(reason)
            return None
        try:
            return decode(frames[1])
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # (ValidationError is one too)
            log.debug("rejected a batch body: %s", exc)
            self.reject(DECODE)
            return None

    def _check(self, frames: Sequence[bytes]) -> str | None:
        if any(len(frame) > self._max_frame_bytes for frame in frames):
            return OVERSIZED
        if not frames:
            return FRAMES
        reason = _header_problem(frames[0])
        if reason is None and len(frames) != 2:
            return FRAMES
        return reason

    def reject(self, reason: str, count: int = 1) -> None:
        """Count ``count`` refusals under ``reason``; a store that cannot count is logged."""
        try:
            self._store.record_rejected(reason, count)
        except Exception:
            log.exception("cannot count a frame rejected for %s", reason)


def _header_problem(header: bytes) -> str | None:
    if len(header) <= _MAGIC_LEN or header[:_MAGIC_LEN] != wire.MAGIC:
        return GARBAGE
    # The version is checked before the length: another version may have another header.
    if header[_MAGIC_LEN] not in wire.ACCEPTED_VERSIONS:
        return VERSION
    if len(header) != _HEADER_LEN:
        return GARBAGE
    if header[_MAGIC_LEN + 1] != wire.KIND_BATCH:
        return KIND
    return None

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
from typing import Final

import msgspec

from cmr.store import InvalidBatchError, Store
from tracer import wire

log = logging.getLogger(__name__)

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
        self._decoder = msgspec.msgpack.Decoder(wire.Batch)

    def handle(self, frames: Sequence[bytes]) -> wire.Ack | None:
        """Store the batch in ``frames`` ([header, body], without the ROUTER identity).

        Returns the Ack to send back (also for a batch already stored), or None when the frames
        were rejected or the store failed. Never raises."""
        reason = self._check(frames)
        if reason is not None:
            self.reject(reason)
            return None
        try:
            batch = self._decoder.decode(frames[1])
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # (ValidationError is one too)
            log.debug("rejected a batch body: %s", exc)
            self.reject(DECODE)
            return None
        try:
            self._store.ingest(batch, self._clock())
        except InvalidBatchError as exc:
            log.debug("rejected a batch: %s", exc)
            self.reject(DECODE)
            return None
        except Exception:
            log.exception("cannot store batch %d of process %x", batch.batch_no, batch.puid)
            self.reject(STORE)
            return None
        return wire.Ack(batch.puid, batch.batch_no)

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

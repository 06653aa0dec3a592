"""Batch bodies encoded into memory the sender keeps (docs/architecture.md, "Bodies the sender
reuses").

A batch of 32,768 events is a body of about a megabyte. Encoded into a new ``bytes`` each time,
it lands in memory the C library has just mapped or given back to the system (a body that size
is freed as its acknowledgement arrives), and every page of it is a page fault on first write:
about half the sender's cost per event, with the GIL held. A body is encoded instead into a
``bytearray`` of a few the sender keeps, once nothing else holds it (its batch acknowledged,
dropped or spooled), so its pages are there already. ``msgspec``'s ``encode_into`` keeps a
buffer's memory as it is when the next body is shorter.

Nothing tells the pool when a body is done with: a kept buffer is free when the pool's own
references are all there are (``sys.getrefcount``, measured once for this interpreter), so a
body still queued, in flight or read by anyone is never written over. The pool is bounded
(``KEEP_BYTES`` in all, ``KEEP_ONE_BYTES`` a buffer) and let go when the sender goes idle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

from tracer._core import recorder

#: The kept buffers' memory in all, and the largest one kept: a batch with big attributes or
#: many samples gets a buffer of its own, freed with it.
KEEP_BYTES: Final = 16 * 1024 * 1024
KEEP_ONE_BYTES: Final = 4 * 1024 * 1024


def _references_when_free() -> int:
    """What ``sys.getrefcount`` reads in ``Bodies._free`` for a kept buffer nothing else holds
    (the list's reference, the loop's, the call's argument): found by running ``_free`` itself."""
    probe = Bodies(lambda batch, buffer: None)
    probe._kept.append(bytearray())
    for count in range(1, 16):
        probe._free_when = count
        if probe._free() is not None:
            return count
    raise RuntimeError("a kept buffer's references could not be counted")


class Bodies:
    __slots__ = ("_encode_into", "_free_when", "_kept")

    def __init__(self, encode_into: Callable[[Any, bytearray], None]) -> None:
        self._encode_into = encode_into
        self._kept: list[bytearray] = []
        self._free_when = _free_when

    def encode(self, batch: Any) -> bytearray:
        """``batch`` encoded into a free kept buffer, or into a new one the pool keeps if it
        has room; with the C accelerator tracemalloc does not count it as the program's."""
        buffer = self._free()
        kept = buffer is not None
        if buffer is None:
            buffer = bytearray()
        recorder.untracked_into(self._encode_into, batch, buffer)
        if buffer.__alloc__() > KEEP_ONE_BYTES:
            if kept:
                self._kept.remove(buffer)
        elif not kept and self.kept_bytes() + buffer.__alloc__() <= KEEP_BYTES:
            self._kept.append(buffer)
        return buffer

    def _free(self) -> bytearray | None:
        for buffer in self._kept:
            if sys.getrefcount(buffer) == self._free_when:
                return buffer
        return None

    def kept_bytes(self) -> int:
        return sum(buffer.__alloc__() for buffer in self._kept)

    def release(self) -> None:
        """Let the kept buffers go (the sender is going idle); those still in use go with their
        batches."""
        self._kept.clear()


_free_when = 0  # until measured, just below: no buffer is free
_free_when = _references_when_free()

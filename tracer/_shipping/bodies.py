"""Batch bodies encoded into memory the sender keeps (docs/architecture.md, "Bodies the sender
reuses").

A batch of 32,768 events is a body of about a megabyte. Encoded into a new ``bytes`` each time,
it lands in memory the C library has just mapped or given back to the system (a body that size
is freed as its acknowledgement arrives), and every page of it is a page fault on first write:
a third to a half of the sender's cost per event, with the GIL held. A body is encoded
instead into a ``bytearray`` of a few the sender keeps, once nothing else holds it (its batch
acknowledged, dropped or spooled), so its pages are there already. ``msgspec``'s
``encode_into`` keeps a buffer's memory as it is when the next body is shorter.

Nothing tells the pool when a body is done with: a kept buffer is free when the pool's own
references are all there are (``sys.getrefcount``, measured once for this interpreter), so a
body still queued, in flight or read by anyone is never written over. The pool is bounded
(``KEEP_BYTES`` in all, ``KEEP_ONE_BYTES`` a buffer), let go when the sender goes idle or ends,
and held to the process's memory bound: the batches in use count their length there
(``Delivery``), and the pool holds the rest of its memory (``hold``), so that the bound is what
the tracer's memory comes to.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

from tracer._core import accel, recorder

#: The kept buffers' memory in all (at most a quarter of the memory bound: ``Sender``), and the
#: largest one kept: a batch with big attributes or many samples gets a buffer of its own, freed
#: with it. A batch of 32,768 events is a body of about a megabyte in a buffer of about 1.5 MB,
#: and a busy program's round sends one for every 32,768 events recorded since the last: 8 MiB
#: covers what such a round leaves in flight while the repository keeps up.
KEEP_BYTES: Final = 8 * 1024 * 1024
KEEP_ONE_BYTES: Final = 4 * 1024 * 1024


def _no_hold(size: int) -> None:
    pass


def _nothing_leased() -> None:
    pass


#: Lets go of the bodies the C accelerator's send gave ZeroMQ and ZeroMQ is done with
#: (``tracer._shipping.transport``): until then such a body is in use.
_reap_sent: Final[Callable[[], None]] = (
    _nothing_leased if accel.speedups is None else accel.speedups.reap_sent
)


class Bodies:
    __slots__ = ("_encode_into", "_free_when", "_held", "_hold", "_keep", "_keep_one", "_kept")

    def __init__(
        self,
        encode_into: Callable[[Any, bytearray], None],
        hold: Callable[[int], None] = _no_hold,
        *,
        keep_bytes: int = KEEP_BYTES,
    ) -> None:
        self._encode_into = encode_into
        self._keep = keep_bytes
        self._keep_one = min(KEEP_ONE_BYTES, keep_bytes)
        #: ``budget.hold``: the pool's memory that no batch in use counts.
        self._hold = hold
        self._held = 0
        self._kept: list[bytearray] = []
        self._free_when = _free_when

    def encode(self, batch: Any) -> bytearray:
        """``batch`` encoded into a free kept buffer, or into a new one the pool keeps if it
        has room; with the C accelerator tracemalloc does not count it as the program's. The
        caller counts its length as the batch's (until the batch is done with)."""
        _reap_sent()  # bodies ZeroMQ is done with: free again
        in_use = self._in_use()  # read once: nothing else runs until the encoding is counted
        free = in_use.index(False) if False in in_use else -1
        buffer = bytearray() if free < 0 else self._kept[free]
        recorder.untracked_into(self._encode_into, batch, buffer)
        if buffer.__alloc__() > self._keep_one:
            if free >= 0:
                del self._kept[free], in_use[free]
        elif free >= 0:
            in_use[free] = True  # the caller's batch now
        elif self.kept_bytes() + buffer.__alloc__() <= self._keep:
            self._kept.append(buffer)
            in_use.append(True)
        self._hold_unused(in_use)
        return buffer

    def _in_use(self) -> list[bool]:
        """Whether each kept buffer is held by anything else (a batch, a view of it)."""
        return [sys.getrefcount(buffer) != self._free_when for buffer in self._kept]

    def _free(self) -> int:
        """The index of a kept buffer nothing else holds, or -1."""
        for index, used in enumerate(self._in_use()):
            if not used:
                return index
        return -1

    def _hold_unused(self, in_use: list[bool]) -> None:
        """Hold what the kept buffers take beyond the length of those in use (``in_use``, one
        flag a kept buffer): what the batches count. Brought up to date at each encoding (a
        batch done with since still counts as in use until then: its length was counted, and
        let go, by the delivery)."""
        unused = sum(
            buffer.__alloc__() - (len(buffer) if used else 0)
            for buffer, used in zip(self._kept, in_use, strict=True)
        )
        if unused != self._held:
            self._hold(unused - self._held)
            self._held = unused

    def kept_bytes(self) -> int:
        return sum(buffer.__alloc__() for buffer in self._kept)

    def release(self) -> None:
        """Let the kept buffers go (the sender is going idle or ending) and what the pool held
        of the memory bound; those still in use go with their batches."""
        self._kept.clear()
        if self._held:
            self._hold(-self._held)
            self._held = 0


def _references_when_free() -> int:
    """What ``sys.getrefcount`` reads in ``Bodies._in_use`` for a kept buffer nothing else holds
    (the list's reference, the comprehension's, the call's argument): found by running it."""
    probe = Bodies(lambda batch, buffer: None)
    probe._kept.append(bytearray())
    for count in range(1, 16):
        probe._free_when = count
        if probe._free() == 0:
            return count
    raise RuntimeError("a kept buffer's references could not be counted")


_free_when = 0  # until measured, just below: every kept buffer is in use
_free_when = _references_when_free()

"""Cutting what the threads recorded into batches: halves of a batch too big for one frame, and
the sequences a chunk continues from an earlier batch (named should the batch be dropped).

More in docs/architecture.md, "Batch size and the GIL".
"""

from __future__ import annotations

from typing import TypeAlias

from invoseq import wire
from tracer._core import recorder

Chunks: TypeAlias = list[tuple[recorder.ThreadBuffer, recorder.Events]]


def halves(chunks: Chunks, size: int) -> tuple[Chunks, Chunks]:
    """``chunks`` (``size`` events in all) cut into a first half of ``size // 2`` events and the
    rest, each thread's events in their order."""
    first: Chunks = []
    second: Chunks = []
    room = size // 2
    for buffer, events in chunks:
        if room >= len(events):
            first.append((buffer, events))
        elif room > 0:
            first.append((buffer, events[:room]))
            second.append((buffer, events[room:]))
        else:
            second.append((buffer, events))
        room = max(0, room - len(events))
    return first, second


class ThreadSequences:
    """Per thread, the sequence of the last Start sent from it: the sequence that a later
    chunk's leading End events belong to (synchronous code nests on a thread)."""

    def __init__(self) -> None:
        self._last: dict[int, bytes] = {}

    def continued(self, chunks: Chunks) -> tuple[bytes, ...]:
        """The sequences of the invocations a chunk ends before it starts any: if the batch is
        dropped, they lost their End events (which carry no sequence id), so they are lossy.

        A thread's chunk that does not begin with a Start continues the thread's last sequence:
        exact for synchronous code, where a thread's open invocations belong to one sequence;
        asyncio tasks interleaving on one thread may end another task's sequence. Costs a look
        at each chunk's first event and a backward scan to its last Start (a few events, unless
        the chunk holds only Ends), not a pass over every event."""
        continued: set[bytes] = set()
        for buffer, events in chunks:
            if not events:
                continue
            if events[0][0] != wire.TAG_START and buffer.tid in self._last:
                continued.add(self._last[buffer.tid])
            for event in reversed(events):
                if event[0] == wire.TAG_START:
                    self._last[buffer.tid] = event[6]
                    break
        return tuple(continued)

    def forget(self, tid: int) -> None:
        """Thread ``tid`` finished: it sends nothing more."""
        self._last.pop(tid, None)

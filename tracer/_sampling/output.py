"""A sampler's output: each finished sample as the sender encodes it, queued (bounded) until the
sender drains the queue with its next batch."""

from __future__ import annotations

import threading
from typing import Final

from tracer._sampling.readings import Pending

#: Samples queued at most between two drains; past it, each is counted dropped instead.
MAX_PENDING_SAMPLES: Final = 200_000

#: A sample as the sender encodes it: (tid, t_ns, weight, duration_ns, cpu_ns, frames, lines,
#: first_tick_ns, last_tick_ns), the ticks as offsets from ``t_ns`` (None: a gap's, it has none).
SampleTuple = tuple[
    int, int, int, int, int, tuple[int, ...], tuple[int, ...], int | None, int | None
]


def record_of(sample: Pending, end: int, cpu: int, *, cpu_mode: bool) -> SampleTuple:
    """``sample`` as sent, its span ending at ``end``, with ``cpu`` ns of CPU time. In CPU mode
    a thread off the CPU is not sampled, so a span may hide a wait: a sample then stands for the
    CPU time it used, and the views read CPU time."""
    duration = cpu if cpu_mode else max(0, end - sample.start_ns)
    # The instants its first and last ticks saw its stack, in its span (bounds: docs/guide.md).
    first = max(0, sample.first_ns - sample.start_ns)
    return (
        sample.tid,
        sample.start_ns,
        sample.weight,
        duration,
        cpu,
        sample.frames,
        sample.lines,
        first,
        max(first, sample.last_ns - sample.start_ns),
    )


class SampleQueue:
    """Finished samples waiting for the sender (any thread puts, the sender drains)."""

    __slots__ = ("_lock", "_samples", "dropped")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: list[SampleTuple] = []
        self.dropped = 0  # samples refused past MAX_PENDING_SAMPLES

    def put(self, record: SampleTuple) -> None:
        """Queue a sample; past the bound, count it dropped instead."""
        with self._lock:
            if len(self._samples) >= MAX_PENDING_SAMPLES:
                self.dropped += 1
                return
            self._samples.append(record)

    def drain(self) -> list[SampleTuple]:
        with self._lock:
            samples, self._samples = self._samples, []
        return samples

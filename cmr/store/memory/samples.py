"""The in-memory backend's stack samples: per thread, a list sorted by time, searched by bisection
the way the SQLite backend reads its ``(puid, tid, t_ns)`` index. Not thread-safe on its own:
``MemoryStore`` calls it under its lock.
"""

from __future__ import annotations

import bisect

from cmr.store._samples import ThreadKey, Window, overlaps, sampler_record
from cmr.store.base import FrameRecord, SampleRecord, SamplerRecord
from invoseq.wire import GAP_TID, Batch


class MemorySamples:
    def __init__(self) -> None:
        self._times: dict[ThreadKey, list[int]] = {}
        self._records: dict[ThreadKey, list[SampleRecord]] = {}
        self._longest: dict[ThreadKey, int] = {}  # the longest span of the thread's samples
        self.frames: dict[tuple[int, int], FrameRecord] = {}
        self.samplers: dict[int, SamplerRecord] = {}
        self.count = 0

    def add(self, batch: Batch, records: list[SampleRecord]) -> None:
        """Keep the batch's frames, samples (the first stored for a thread and time wins) and
        sampler report (the one with the most ticks: reports are cumulative)."""
        puid = batch.puid
        for f in batch.frames:
            self.frames[puid, f.frame] = FrameRecord(f.file, f.function, f.line)
        report = batch.sampler
        known = self.samplers.get(puid)
        if report is not None and (known is None or report.ticks >= known.ticks):
            self.samplers[puid] = sampler_record(report)
        for record in records:
            key = (record.puid, record.tid)
            times = self._times.setdefault(key, [])
            at = bisect.bisect_left(times, record.t_ns)
            if at < len(times) and times[at] == record.t_ns:
                continue
            times.insert(at, record.t_ns)  # appends, in the usual case of samples in order
            self._records.setdefault(key, []).insert(at, record)
            self._longest[key] = max(self._longest.get(key, 0), record.duration_ns)
            self.count += record.tid != GAP_TID  # the sampler's gaps are not counted

    def overlapping(
        self, windows: dict[ThreadKey, list[Window]]
    ) -> tuple[list[SampleRecord], dict[tuple[int, int], FrameRecord]]:
        """As ``sqlite_samples.load_samples``: by thread then time, each sample once."""
        samples: list[SampleRecord] = []
        for key, spans in sorted(windows.items()):
            times = self._times.get(key)
            if not times:
                continue
            records = self._records[key]
            reach = max(self._longest[key], 1)
            seen: set[int] = set()
            for window in spans:
                start, end = window
                first = bisect.bisect_right(times, start - reach)
                last = bisect.bisect_left(times, end)
                for record in records[first:last]:
                    if record.t_ns not in seen and overlaps(record, window):
                        seen.add(record.t_ns)
                        samples.append(record)
        used = {(s.puid, frame) for s in samples for frame in s.frames}
        frames = {key: self.frames[key] for key in sorted(used) if key in self.frames}
        return samples, frames

    def prune(self, before_ns: int) -> int:
        """Drop the samples taken before ``before_ns``; returns how many."""
        removed = 0
        for key, times in list(self._times.items()):
            cut = bisect.bisect_left(times, before_ns)
            if cut:
                removed += cut
                del times[:cut]
                del self._records[key][:cut]
            if not times:
                del self._times[key], self._records[key], self._longest[key]
        return removed

    def forget(self, puid: int) -> None:
        """Drop what is kept about a process that is gone (its samples are already pruned)."""
        self.frames = {key: frame for key, frame in self.frames.items() if key[0] != puid}
        self.samplers.pop(puid, None)

    def threads(self) -> set[ThreadKey]:
        """The threads it holds samples of."""
        return {key for key, times in self._times.items() if times}

    def holds(self, puid: int) -> bool:
        return any(key[0] == puid for key in self._times)

"""A sequence as a speedscope profile (https://www.speedscope.app, file-format-schema.json).

Speedscope shows one profile at a time and offers the others in a menu, so each thread gets its
own: an **evented** profile per track of ``cmr.views.analyses.lanes`` (a thread, or the calls of
one that overlap without nesting: interleaved asyncio tasks), whose open and close events are the
calls' starts and ends, measured and estimated calls alike. When the sequence has stack samples,
each sampled thread also gets a **sampled** profile built from the raw samples, every stack
weighted by the time it stands for, so the left-heavy and sandwich views show where the time went.

Times are nanoseconds from the sequence's first call: speedscope reads numbers as doubles, whose 53
bits would round absolute wall-clock nanoseconds. A call still open lasts until the latest time
the sequence shows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import msgspec

from cmr.store.base import FrameRecord, SampleRecord, SequenceData
from cmr.views.analyses.lanes import Track, lay_out
from cmr.views.model import UNKNOWN_THREAD, Node, SequenceTree

SCHEMA_URL: Final = "https://www.speedscope.app/file-format-schema.json"
EXPORTER: Final = "invoseq cmr"

#: A speedscope frame's identity: name, file and line (None when unknown).
FrameKey = tuple[str, str | None, int | None]


class _Frames:
    """``shared.frames``: each distinct frame once, referred to by index."""

    def __init__(self) -> None:
        self.index: dict[FrameKey, int] = {}
        self.frames: list[dict[str, Any]] = []

    def of(self, key: FrameKey) -> int:
        found = self.index.get(key)
        if found is None:
            name, file, line = key
            frame: dict[str, Any] = {"name": name}
            if file is not None:
                frame["file"] = file
            if line is not None:
                frame["line"] = line
            found = self.index[key] = len(self.frames)
            self.frames.append(frame)
        return found


def render_speedscope(tree: SequenceTree, data: SequenceData | None = None) -> bytes:
    """The speedscope JSON document of ``tree`` (any view of it), plus a sampled profile per
    thread for the samples of ``data`` (the records ``tree`` was built from), if any."""
    layout = lay_out(tree)
    frames = _Frames()
    origin = layout.start_ns
    profiles = [_evented(track, frames, origin, layout.end_ns) for track in layout.tracks]
    if data is not None and data.samples:
        profiles += _sampled_profiles(data, frames)
    document = {
        "$schema": SCHEMA_URL,
        "shared": {"frames": frames.frames},
        "profiles": profiles,
        "name": f"invoseq sequence {tree.seq.hex()}",
        "activeProfileIndex": 0,
        "exporter": EXPORTER,
    }
    return msgspec.json.encode(document)


def track_name(track: Track) -> str:
    """``host:pid thread (tid)``, with ``#2``, ``#3``... for a thread's extra tracks."""
    name = f"{track.process.host}:{track.process.pid} {track.thread.name} ({track.thread.tid})"
    return name if track.index == 0 else f"{name} #{track.index + 1}"


def node_frame(node: Node) -> FrameKey:
    """A measured call is known by its name; an estimated one also by its code location."""
    if node.frame is None:
        return (node.name, None, None)
    file, _function, line = node.frame
    return (node.name, file, line)


def _evented(track: Track, frames: _Frames, origin: int, end_ns: int) -> dict[str, Any]:
    events = [
        {
            "type": "O" if event.opening else "C",
            "frame": frames.of(node_frame(event.slice.node)),
            "at": event.at_ns - origin,
        }
        for event in track.events
    ]
    return {
        "type": "evented",
        "name": track_name(track),
        "unit": "nanoseconds",
        "startValue": 0,
        "endValue": end_ns - origin,
        "events": events,
    }


def _sampled_profiles(data: SequenceData, frames: _Frames) -> list[dict[str, Any]]:
    """One sampled profile per thread, samples in time order, each weighted by the time it
    stands for (a collapsed run of idle samples by its whole duration)."""
    by_thread: dict[tuple[int, int], list[SampleRecord]] = {}
    for sample in sorted(data.samples, key=lambda s: (s.t_ns, s.puid, s.tid)):
        by_thread.setdefault((sample.puid, sample.tid), []).append(sample)
    profiles = []
    for (puid, tid), samples in by_thread.items():
        stacks = [_stack(puid, sample.frames, data.frames, frames) for sample in samples]
        weights = [sample.duration_ns for sample in samples]
        profiles.append(
            {
                "type": "sampled",
                "name": "samples · " + _thread_label(data, puid, tid),
                "unit": "nanoseconds",
                "startValue": 0,
                "endValue": sum(weights),
                "samples": stacks,
                "weights": weights,
            }
        )
    return profiles


def _stack(
    puid: int,
    frame_ids: Iterable[int],
    records: dict[tuple[int, int], FrameRecord],
    frames: _Frames,
) -> list[int]:
    stack = []
    for frame_id in frame_ids:
        record = records.get((puid, frame_id))
        if record is None:
            key: FrameKey = (f"<unknown frame {frame_id}>", None, None)
        else:
            key = (record.function, record.file, record.line)
        stack.append(frames.of(key))
    return stack


def _thread_label(data: SequenceData, puid: int, tid: int) -> str:
    process = data.processes.get(puid)
    where = f"{process.host}:{process.pid}" if process is not None else f"{puid:x}"
    thread = data.threads.get((puid, tid))
    return f"{where} {thread.name if thread is not None else UNKNOWN_THREAD} ({tid})"

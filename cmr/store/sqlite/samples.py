"""The SQLite backend's stack samples: writing a batch's samples, frames and sampler report, and
reading back the samples a sequence's windows overlap. Each function runs inside a transaction the
caller holds (``SQLiteStore``), on its connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from cmr.store._samples import SampleRow, ThreadKey, Window, read_windows
from cmr.store.base import FrameRecord, SampleRecord, SamplerRecord
from cmr.store.sqlite.schema import (
    SAMPLES_IN_WINDOW,
    UPSERT_SAMPLE_THREAD,
    UPSERT_SAMPLER,
)
from tracer.wire import Batch

#: Bound parameters per ``IN (...)`` list, well under SQLite's limit.
_CHUNK: Final = 500

_encode_stack = msgspec.msgpack.Encoder().encode


def store_samples(conn: sqlite3.Connection, batch: Batch, records: list[SampleRecord]) -> int:
    """Write the batch's frames, samples and sampler report; returns how many samples were new
    (a sample already stored for its thread and time is kept as it was)."""
    puid = batch.puid
    if batch.frames:
        conn.executemany(
            "INSERT OR REPLACE INTO frames VALUES (?, ?, ?, ?, ?)",
            [(puid, f.frame, f.file, f.function, f.line) for f in batch.frames],
        )
    if batch.sampler is not None:
        report = batch.sampler
        conn.execute(
            UPSERT_SAMPLER,
            (
                puid,
                report.mode,
                report.interval_ms,
                report.ticks,
                report.late_ticks,
                report.cost_ns,
            ),
        )
    if not records:
        return 0
    cursor = conn.executemany(
        "INSERT OR IGNORE INTO samples VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                r.puid,
                r.tid,
                r.t_ns,
                r.weight,
                r.duration_ns,
                r.cpu_ns,
                _encode_stack((r.frames, r.lines)),
            )
            for r in records
        ],
    )
    longest: dict[ThreadKey, int] = {}
    for r in records:
        key = (r.puid, r.tid)
        longest[key] = max(longest.get(key, 0), r.duration_ns)
    conn.executemany(UPSERT_SAMPLE_THREAD, [(*key, span) for key, span in longest.items()])
    inserted = max(cursor.rowcount, 0)
    conn.execute("UPDATE counters SET value = value + ? WHERE name = 'samples'", (inserted,))
    return inserted


def load_samples(
    conn: sqlite3.Connection, windows: dict[ThreadKey, list[Window]]
) -> tuple[list[SampleRecord], dict[tuple[int, int], FrameRecord]]:
    """The samples overlapping ``windows`` (per thread, sorted and disjoint), by thread then
    time, each once even when it spans two windows; and the frames they use."""

    def longest(puid: int, tid: int) -> int | None:
        row = conn.execute(
            "SELECT longest_ns FROM sample_threads WHERE puid = ? AND tid = ?", (puid, tid)
        ).fetchone()
        return None if row is None else int(row[0])

    def in_window(params: dict[str, Any]) -> Iterable[SampleRow]:
        return conn.execute(SAMPLES_IN_WINDOW, params)

    samples = read_windows(windows, longest, in_window)
    return samples, _frames(conn, samples)


def _frames(
    conn: sqlite3.Connection, samples: Iterable[SampleRecord]
) -> dict[tuple[int, int], FrameRecord]:
    wanted: dict[int, set[int]] = {}
    for sample in samples:
        wanted.setdefault(sample.puid, set()).update(sample.frames)
    frames: dict[tuple[int, int], FrameRecord] = {}
    for puid, ids in wanted.items():
        ordered = sorted(ids)
        for at in range(0, len(ordered), _CHUNK):
            chunk = ordered[at : at + _CHUNK]
            marks = ", ".join("?" * len(chunk))
            for frame, file, function, line in conn.execute(
                f"SELECT frame, file, function, line FROM frames "
                f"WHERE puid = ? AND frame IN ({marks})",
                (puid, *chunk),
            ):
                frames[puid, frame] = FrameRecord(file, function, line)
    return frames


def load_samplers(conn: sqlite3.Connection) -> dict[int, SamplerRecord]:
    return {
        puid: SamplerRecord(*report)
        for puid, *report in conn.execute(
            "SELECT puid, mode, interval_ms, ticks, late_ticks, cost_ns FROM samplers ORDER BY puid"
        )
    }

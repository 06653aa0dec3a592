"""The SQLite backend's stack samples: writing a batch's samples, frames and sampler report, and
reading back the samples a sequence's windows overlap. Each function runs inside a transaction the
caller holds (``SQLiteStore``), on its connection.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterable

from cmr.store._samples import ThreadKey, Window, encode_stack, sampler_record, without_gaps
from cmr.store._samples import load_samplers as shared_load_samplers
from cmr.store._samples import load_samples as shared_load_samples
from cmr.store.base import FrameRecord, SampleRecord, SamplerRecord
from cmr.store.sqlite.read import in_chunks
from cmr.store.sqlite.statements import SAMPLES_IN_WINDOW, UPSERT_SAMPLE_THREAD, UPSERT_SAMPLER
from invoseq.wire import Batch


def store_samples(conn: sqlite3.Connection, batch: Batch, records: list[SampleRecord]) -> int:
    """Write the batch's frames, samples and sampler report; returns how many of its threads'
    samples were new (a sample already stored for its thread and time is kept as it was; the
    sampler's gaps are stored, not counted)."""
    puid = batch.puid
    if batch.frames:
        conn.executemany(
            "INSERT OR REPLACE INTO frames VALUES (?, ?, ?, ?, ?)",
            [(puid, f.frame, f.file, f.function, f.line) for f in batch.frames],
        )
    if batch.sampler is not None:
        report = batch.sampler
        conn.execute(UPSERT_SAMPLER, (puid, *dataclasses.astuple(sampler_record(report))))
    if not records:
        return 0
    threads, gaps = without_gaps(records)
    inserted = _insert(conn, threads)
    _insert(conn, gaps)  # the sampler's, not samples of a thread: not counted
    longest: dict[ThreadKey, int] = {}
    for r in records:
        key = (r.puid, r.tid)
        longest[key] = max(longest.get(key, 0), r.duration_ns)
    conn.executemany(UPSERT_SAMPLE_THREAD, [(*key, span) for key, span in longest.items()])
    conn.execute("UPDATE counters SET value = value + ? WHERE name = 'samples'", (inserted,))
    return inserted


def _insert(conn: sqlite3.Connection, records: list[SampleRecord]) -> int:
    """Insert the samples; how many were new."""
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
                encode_stack(r),
            )
            for r in records
        ],
    )
    return max(cursor.rowcount, 0)


def load_samples(
    conn: sqlite3.Connection, windows: dict[ThreadKey, list[Window]]
) -> tuple[list[SampleRecord], dict[tuple[int, int], FrameRecord]]:
    """The samples overlapping ``windows`` and their frames (``_samples.load_samples``)."""
    return shared_load_samples(conn.execute, windows, mark="?", in_window_sql=SAMPLES_IN_WINDOW)


def sampled_threads(conn: sqlite3.Connection, puids: Iterable[int]) -> set[ThreadKey]:
    """The threads of those processes that the store holds samples of."""
    found: set[ThreadKey] = set()
    for part in in_chunks(sorted(set(puids))):
        marks = ", ".join("?" * len(part))
        found.update(
            conn.execute(f"SELECT puid, tid FROM sample_threads WHERE puid IN ({marks})", part)
        )
    return found


def load_samplers(conn: sqlite3.Connection) -> dict[int, SamplerRecord]:
    return shared_load_samplers(conn.execute)

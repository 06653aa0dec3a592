"""A group commit's rows in the SQLite backend (``SQLiteStore.ingest_prepared``): each batch's blob
and index, then the group's sequence summaries once, then the counters; on a connection inside
the transaction the caller holds."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Container, Iterable, Mapping

from cmr.store import single_rows
from cmr.store.base import Outcome
from cmr.store.batch_index import Prepared, write_each
from cmr.store.grouping import group_parts
from cmr.store.rules import lost_rows, lost_window_rows
from cmr.store.sqlite import single
from cmr.store.sqlite import summaries as sqlite_summaries
from cmr.store.sqlite.samples import store_samples
from cmr.store.sqlite.statements import UPSERT_PROCESS


def write_group(
    conn: sqlite3.Connection, prepared: list[Prepared], outcomes: list[Outcome], received_ns: int
) -> None:
    """Write the ``prepared`` batches, each one's outcome set in ``outcomes`` (False: it was
    stored before, and nothing of it is written again)."""
    index = _Index()
    written = write_each(prepared, outcomes, lambda ready: _write(conn, ready, received_ns, index))
    singles = single.store(conn, index.written) if written and single_rows.ENABLED else set()
    index.write(conn, singles)
    if written:  # after every late End: a sequence several batches carry, once
        sqlite_summaries.store(conn, group_parts(written), singles)
    stored, events = len(written), sum(packed.events for packed in written)
    conn.executemany(  # once per group: one row each, however many batches
        "UPDATE counters SET value = value + ? WHERE name = ?",
        ((stored, "batches"), (events, "events")),
    )


class _Index:
    """The index rows of a group's batches (``write_index``), written together in key order:
    rows keyed by a random sequence id land on pages in order, each page visited once, instead
    of a page a row (issue 33: a batch of short sequences carries hundreds)."""

    __slots__ = ("rows", "written")

    def __init__(self) -> None:
        self.rows: list[tuple[bytes, int, int, bytes | None]] = []
        #: The group's batches, their rows not added yet.
        self.written: list[single_rows.Written] = []

    def add(
        self, puid: int, batch_no: int, seqs: Iterable[bytes], seq_methods: Mapping[bytes, bytes]
    ) -> None:
        methods = seq_methods.get
        self.rows += [(seq, puid, batch_no, methods(seq)) for seq in seqs]

    def write(self, conn: sqlite3.Connection, singles: Container[bytes] = ()) -> None:
        """The rows added and those of the batches ``written``, but the sequences stored as
        single rows (``singles``: ``cmr.store.sqlite.single``)."""
        for puid, batch_no, packed in self.written:
            seqs = packed.seqs
            self.add(puid, batch_no, [s for s in seqs if s not in singles], packed.seq_methods)
        self.rows.sort()  # keys are distinct: a batch is written once
        conn.executemany("INSERT OR IGNORE INTO batch_seqs VALUES (?, ?, ?, ?)", self.rows)


def _write(conn: sqlite3.Connection, ready: Prepared, received_ns: int, index: _Index) -> bool:
    """One batch's rows but its index and its sequences' summaries, inside the caller's
    transaction (False: it was stored before); the caller stores the index and the summaries of
    the group (``index``, its rows added here) and counts what it stored."""
    batch, packed, samples = ready.batch, ready.packed, ready.samples
    process = batch.process
    puid = batch.puid
    batch_no = batch.batch_no
    cursor = conn.execute(
        "INSERT OR IGNORE INTO batches VALUES (?, ?, ?, ?, ?, ?)",
        (
            puid,
            batch_no,
            received_ns,
            packed.events,
            process.clock_offset_ns,
            packed.chunks,
        ),
    )
    if cursor.rowcount == 0:
        conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'duplicate_batches'")
        return False
    conn.execute(
        UPSERT_PROCESS,
        (
            puid,
            process.pid,
            process.host,
            process.platform_id,
            json.dumps(process.argv),
            process.clock_offset_ns,
            process.started_ns,
            int(batch.final),
            batch.dropped,
            received_ns,
            process.heartbeat_ms,
        ),
    )
    if batch.methods:
        conn.executemany(
            "INSERT OR REPLACE INTO methods VALUES (?, ?, ?, ?, ?, ?)",
            [(puid, m.method, m.module, m.qualname, m.file, m.line) for m in batch.methods],
        )
    if batch.threads:
        conn.executemany(
            "INSERT OR REPLACE INTO threads VALUES (?, ?, ?, ?)",
            [(puid, t.tid, t.native_id, t.name) for t in batch.threads],
        )
    index.written.append((puid, batch_no, packed))
    # First write wins for an event key: a replayed or forged duplicate changes nothing.
    if packed.late_ends:
        conn.executemany("INSERT OR IGNORE INTO late_ends VALUES (?, ?, ?, ?)", packed.late_ends)
    if packed.late_attrs:
        conn.executemany("INSERT OR IGNORE INTO late_attrs VALUES (?, ?, ?, ?)", packed.late_attrs)
    if packed.handoffs:
        conn.executemany(
            "INSERT OR IGNORE INTO handoffs VALUES (?, ?, ?, ?, ?, ?, ?)", packed.handoffs
        )
    if batch.lost_seqs:
        conn.executemany("INSERT OR IGNORE INTO lost_seqs VALUES (?, ?)", lost_rows(batch))
    if batch.lost_windows:
        rows = lost_window_rows(batch)
        conn.executemany("INSERT OR IGNORE INTO lost_windows VALUES (?, ?, ?)", rows)
    store_samples(conn, batch, samples)
    return True


def write_index(
    conn: sqlite3.Connection,
    puid: int,
    batch_no: int,
    seqs: Iterable[bytes],
    seq_methods: Mapping[bytes, bytes],
) -> None:
    """Which sequences batch ``batch_no`` of ``puid`` holds (``seqs``), and the methods each ran
    in it (``seq_methods``: a msgpack array each, for those of ``seqs`` with Starts in it)."""
    index = _Index()
    index.add(puid, batch_no, seqs, seq_methods)
    index.write(conn)

"""A group commit's rows in the SQLite backend (``SQLiteStore.ingest_prepared``): each batch's blob
and index, then the group's sequence summaries once, then the counters; on a connection inside
the transaction the caller holds.

What needs no database is made before the transaction (``GroupPlan``): with ``cmr serve
--workers`` the writers take turns (``cmr.store.sqlite.turns``), and a group's rows are made
while another worker writes (issue 33: the turn bounded the workers' rate, and a fifth of it
was Python making rows)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from cmr.store import single_rows
from cmr.store.base import Outcome
from cmr.store.batch_index import PackedBatch, Prepared, write_each
from cmr.store.grouping import GroupParts, group_parts, only
from cmr.store.rules import lost_rows, lost_window_rows
from cmr.store.single_rows import Written
from cmr.store.sqlite import single
from cmr.store.sqlite import summaries as sqlite_summaries
from cmr.store.sqlite.samples import store_samples
from cmr.store.sqlite.statements import UPSERT_PROCESS

#: A group's index rows (``batch_seqs``), written in key order (``_index_rows``).
INSERT_INDEX = "INSERT OR IGNORE INTO batch_seqs VALUES (?, ?, ?, ?)"
#: A ``batch_seqs`` row: seq, puid, batch_no, the methods the sequence ran in the batch.
IndexRow = tuple[bytes, int, int, bytes | None]


class GroupPlan:
    """A group's rows made before its transaction, for every batch of the group as prepared
    (in write order): its single rows (``single.Planned``), its other sequences' index rows
    and summary parts. ``write_group`` makes them again for the batches it wrote when one was
    stored before, or for the single rows it stored when one of them was (both rare: a batch
    sent twice)."""

    __slots__ = ("index_rows", "parts", "prepared", "singles", "written")

    def __init__(self, prepared: list[Prepared], names: single.RootNames) -> None:
        self.prepared = prepared
        self.written = [(r.batch.puid, r.batch.batch_no, r.packed) for r in prepared]
        names.learn(ready.batch for ready in prepared)
        self.singles = single.Planned(self.written, names if single_rows.ENABLED else None)
        self.index_rows, self.parts = _side(self.written, self.singles.others)


def _side(
    written: Sequence[Written], others: AbstractSet[bytes]
) -> tuple[list[IndexRow], GroupParts]:
    """The index rows and summary parts of ``others``, the sequences of ``written`` that are
    not single rows. Each batch's parts are cut to them before the group's are merged: in a
    group of requests they are the few sequences a batch's end cut in two, and merging every
    sequence (``grouping._merged``, per sequence in Python, once any sequence is in two
    batches) to take the single rows out after cost more than their rows."""
    rows: list[IndexRow] = []
    packs: list[PackedBatch] = []
    for puid, batch_no, packed in written:
        mine = packed.seqs & others
        rows += _index_rows(puid, batch_no, mine, packed.seq_methods)
        packs.append(packed if len(mine) == len(packed.seqs) else only(packed, mine))
    rows.sort()  # keys are distinct: a batch is written once
    return rows, group_parts(packs)


def write_group(
    conn: sqlite3.Connection,
    plan: GroupPlan,
    outcomes: list[Outcome],
    received_ns: int,
    names: single.RootNames,
) -> None:
    """Write the batches ``plan`` prepared, each one's outcome set in ``outcomes`` (False: it
    was stored before, and nothing of it is written again)."""
    written = write_each(plan.prepared, outcomes, lambda ready: _write(conn, ready, received_ns))
    if len(written) != len(plan.prepared):  # some were stored before
        plan = GroupPlan([ready for ready in plan.prepared if outcomes[ready.at] is True], names)
    if written:
        planned = plan.singles
        stored = single.store(conn, planned, names) if single_rows.ENABLED else planned.seqs
        index_rows, parts = plan.index_rows, plan.parts
        if stored is not planned.seqs:  # some single rows were stored before
            index_rows, parts = _side(plan.written, planned.others | (planned.seqs - stored))
        conn.executemany(INSERT_INDEX, index_rows)
        # after every late End: a sequence several batches carry, once
        sqlite_summaries.store(conn, parts)
    stored_batches, events = len(written), sum(packed.events for packed in written)
    conn.executemany(  # once per group: one row each, however many batches
        "UPDATE counters SET value = value + ? WHERE name = ?",
        ((stored_batches, "batches"), (events, "events")),
    )


def _index_rows(
    puid: int, batch_no: int, seqs: Iterable[bytes], seq_methods: Mapping[bytes, bytes]
) -> list[IndexRow]:
    """Which sequences batch ``batch_no`` of ``puid`` holds (``seqs``), and the methods each ran
    in it (``seq_methods``: a msgpack array each, for those of ``seqs`` with Starts in it): rows
    written together in key order, so that rows keyed by a random sequence id land on pages in
    order, each page visited once, instead of a page a row (issue 33: a batch of short
    sequences carries hundreds)."""
    methods = seq_methods.get
    return [(seq, puid, batch_no, methods(seq)) for seq in seqs]


def _write(conn: sqlite3.Connection, ready: Prepared, received_ns: int) -> bool:
    """One batch's rows but its index and its sequences' summaries, inside the caller's
    transaction (False: it was stored before); the caller stores the index and the summaries of
    the group and counts what it stored."""
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
    rows = _index_rows(puid, batch_no, seqs, seq_methods)
    rows.sort()
    conn.executemany(INSERT_INDEX, rows)

"""Writing one batch into PostgreSQL, in the caller's transaction.

The batch goes in first, as it arrived (``cmr.store.stored_batches``: its thread chunks as one
``bytea``, with its key, ``INSERT ... ON CONFLICT DO NOTHING`` on ``batches``): when two nodes
receive the same batch, the second waits there for the first to commit, then finds the key and
stores nothing. Then its small index, each one statement over arrays (``unnest``), sent in one
pipeline: a batch costs a round trip or two, not one per statement. The sequences each batch
holds (``batch_seqs``, but single rows: ``cmr.store.postgres.single``) and their listing lines
(``postgres_summaries``) are written once for all the batches of the transaction, after the last
of them (``grouping.group_parts``): a sequence several of them carry is one row.
Hand-offs and samples are streamed with binary COPY into temporary staging tables and moved into
the day-partitioned tables by one ``INSERT ... SELECT ... ON CONFLICT DO NOTHING`` each, which
computes every row's day and keeps the first write of a key.

Rows other batches may write at the same time are locked in one order by every node — batch by
batch (by process, then batch number) the batch key and the process (and its methods, threads,
frames), then, for the whole transaction, the single rows (``cmr.store.postgres.single``), each
summary table's rows sorted by key and the sequences sorted by id (those whose root a late End
ends among them: the processes' locks keep their other batches from changing them meanwhile) —
so two nodes wait on each other in a cycle only when one meets a single row the other is
storing at that moment (PostgreSQL rolls one back, and the store runs it again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cmr.store._samples import encode_stack, sampler_record, without_gaps
from cmr.store.base import SampleRecord
from cmr.store.batch_index import PackedBatch
from cmr.store.postgres.connect import Conn, arrays
from cmr.store.postgres.partitions import day_of, day_sql
from cmr.store.postgres.statements import (
    UPSERT_COUNTERS,
    UPSERT_PROCESS,
    UPSERT_SAMPLE_THREADS,
    UPSERT_SAMPLER,
)
from cmr.store.rules import lost_rows, lost_window_rows
from invoseq.wire import Batch


@dataclass(frozen=True, slots=True)
class _Stage:
    """A temporary table rows are copied into, and the statement moving them to ``table``."""

    table: str
    columns: tuple[tuple[str, str], ...]  # (name, type)
    time_column: str
    order: str = ""  # ORDER BY for the move, where other processes' rows may share a key

    @property
    def name(self) -> str:
        return f"stage_{self.table}"

    def create(self) -> str:
        columns = ", ".join(f"{name} {kind}" for name, kind in self.columns)
        return f"CREATE TEMP TABLE IF NOT EXISTS {self.name} ({columns}) ON COMMIT DELETE ROWS"

    def copy(self) -> str:
        return f"COPY {self.name} FROM STDIN (FORMAT BINARY)"

    def move(self) -> str:
        names = ", ".join(name for name, _ in self.columns)
        order = f" ORDER BY {self.order}" if self.order else ""
        return (
            f"INSERT INTO {self.table} ({names}, day) "
            f"SELECT {names}, {day_sql(self.time_column)} FROM {self.name}{order} "
            "ON CONFLICT DO NOTHING"
        )

    @property
    def types(self) -> list[str]:
        return [kind for _, kind in self.columns]


HANDOFFS: Final = _Stage(
    "handoffs",
    (
        ("hid", "int8"),
        ("seq", "bytea"),
        ("puid", "int8"),
        ("parent", "int8"),
        ("kind", "text"),
        ("method", "int8"),
        ("submitted_ns", "int8"),
    ),
    "submitted_ns",
    order="hid",
)
SAMPLES: Final = _Stage(
    "samples",
    (
        ("puid", "int8"),
        ("tid", "int8"),
        ("t_ns", "int8"),
        ("weight", "int8"),
        ("duration_ns", "int8"),
        ("cpu_ns", "int8"),
        ("stack", "bytea"),
    ),
    "t_ns",
)
STAGES: Final = (HANDOFFS, SAMPLES)


def create_stages(conn: Conn) -> None:
    """The staging tables of this connection (temporary: each connection has its own)."""
    for stage in STAGES:
        conn.execute(stage.create())


def needed_days(
    packed: PackedBatch, samples: list[SampleRecord], window: tuple[int, int]
) -> set[tuple[str, int]]:
    """The (table, day) partitions the batch's rows go to (asked only when one was missing)."""
    days = {("handoffs", day_of(row[6], window)) for row in packed.handoffs}
    days |= {("samples", day_of(r.t_ns, window)) for r in samples}
    return days


def write_batch(
    conn: Conn,
    batch: Batch,
    *,
    packed: PackedBatch,
    samples: list[SampleRecord],
    received_ns: int,
    window: tuple[int, int],
    node: int,
) -> bool:
    """Store the batch (False: it was stored before). Runs inside the caller's transaction."""
    puid, batch_no = batch.puid, batch.batch_no
    cursor = conn.execute(
        "INSERT INTO batches (puid, batch_no, received_ns, events, clock_offset_ns, chunks) "
        "VALUES (%s, %s, %s, %s, %s, %b) ON CONFLICT DO NOTHING",
        (puid, batch_no, received_ns, packed.events, batch.process.clock_offset_ns, packed.chunks),
    )
    if cursor.rowcount == 0:
        conn.execute(UPSERT_COUNTERS, (node, 0, 1, 0, 0))
        return False
    with conn.pipeline():
        _upsert_process(conn, batch, received_ns)  # this process's batches go one at a time
        _upsert_infos(conn, batch)
        _store_index(conn, packed)
        if batch.lost_seqs:
            lost = lost_rows(batch)
            conn.execute(
                "INSERT INTO lost_seqs SELECT * FROM unnest(%b::bytea[], %b::bigint[]) "
                "ON CONFLICT DO NOTHING",
                ([seq for seq, _ in lost], [puid for _, puid in lost]),
            )
        if batch.lost_windows:
            windows = lost_window_rows(batch)
            conn.execute(
                "INSERT INTO lost_windows SELECT * FROM unnest(%b::bigint[], %b::bigint[], "
                "%b::bigint[]) ON CONFLICT DO NOTHING",
                tuple([row[i] for row in windows] for i in range(3)),
            )
        _store_sampler(conn, batch, samples)
    window_params = {"lowest": window[0], "highest": window[1]}
    _move(conn, HANDOFFS, packed.handoffs, window_params)
    threads, gaps = without_gaps(samples)
    stored_samples = _move(conn, SAMPLES, _sample_rows(threads), window_params)
    _move(conn, SAMPLES, _sample_rows(gaps), window_params)  # the sampler's: not counted
    conn.execute(UPSERT_COUNTERS, (node, 1, 0, packed.events, stored_samples))
    return True


def _sample_rows(samples: list[SampleRecord]) -> list[tuple[object, ...]]:
    return [
        (r.puid, r.tid, r.t_ns, r.weight, r.duration_ns, r.cpu_ns, encode_stack(r)) for r in samples
    ]


def _store_index(conn: Conn, packed: PackedBatch) -> None:
    """What lookups need of the batch: the Ends and Attrs whose Start is not in it (first write
    of an event key wins). Its sequences and the methods each ran are written for the whole
    group, once its single rows are known (``cmr.store.postgres.single``)."""
    if packed.late_ends:
        conn.execute(
            "INSERT INTO late_ends SELECT * FROM unnest("
            "%b::bigint[], %b::bigint[], %b::bigint[], %b::text[]) ON CONFLICT DO NOTHING",
            arrays(packed.late_ends),
        )
    if packed.late_attrs:
        conn.execute(
            "INSERT INTO late_attrs SELECT * FROM unnest("
            "%b::bigint[], %b::bigint[], %b::bigint[], %b::bytea[]) ON CONFLICT DO NOTHING",
            arrays(packed.late_attrs),
        )


def _move(
    conn: Conn, stage: _Stage, rows: Sequence[Sequence[object]], params: dict[str, int]
) -> int:
    """Copy ``rows`` into the stage and move them into the table; how many were new."""
    if not rows:
        return 0
    with conn.cursor() as cursor:
        with cursor.copy(stage.copy()) as copy:
            copy.set_types(stage.types)
            for row in rows:
                copy.write_row(row)
        cursor.execute(stage.move(), params)
        return max(cursor.rowcount, 0)


def _upsert_process(conn: Conn, batch: Batch, received_ns: int) -> None:
    process = batch.process
    conn.execute(
        UPSERT_PROCESS,
        {
            "puid": batch.puid,
            "pid": process.pid,
            "host": process.host,
            "platform_id": process.platform_id,
            "argv": list(process.argv),
            "clock_offset_ns": process.clock_offset_ns,
            "started_ns": process.started_ns,
            "ended": batch.final,
            "dropped": batch.dropped,
            "last_seen_ns": received_ns,
            "heartbeat_ms": process.heartbeat_ms,
        },
    )


def _upsert_infos(conn: Conn, batch: Batch) -> None:
    """Methods, threads and frames: the latest description of an id wins, as in SQLite."""
    puid = batch.puid
    methods = {m.method: (m.module, m.qualname, m.file, m.line) for m in batch.methods}
    if methods:
        _upsert(conn, "methods", ("method", "module", "qualname", "file", "line"), puid, methods)
    threads = {t.tid: (t.native_id, t.name) for t in batch.threads}
    if threads:
        _upsert(conn, "threads", ("tid", "native_id", "name"), puid, threads)
    frames = {f.frame: (f.file, f.function, f.line) for f in batch.frames}
    if frames:
        _upsert(conn, "frames", ("frame", "file", "function", "line"), puid, frames)


_TYPES: Final = {
    "module": "text",
    "qualname": "text",
    "file": "text",
    "line": "bigint",
    "native_id": "bigint",
    "name": "text",
    "function": "text",
}


def _upsert(
    conn: Conn,
    table: str,
    key_and_columns: tuple[str, ...],
    puid: int,
    values: Mapping[int, tuple[object, ...]],
) -> None:
    """Upsert rows of ``table`` keyed (puid, id), in id order; ``values`` maps an id to the
    other columns, named after the key in ``key_and_columns``."""
    key, *columns = key_and_columns
    ids = sorted(values)
    arrays: list[list[object]] = [[values[i][at] for i in ids] for at in range(len(columns))]
    unnest = ", ".join(f"%b::{_TYPES[column]}[]" for column in columns)
    updates = ", ".join(f"{column} = excluded.{column}" for column in columns)
    conn.execute(
        f"INSERT INTO {table} (puid, {key}, {', '.join(columns)}) "
        f"SELECT %s, * FROM unnest(%b::bigint[], {unnest}) ORDER BY 2 "
        f"ON CONFLICT (puid, {key}) DO UPDATE SET {updates}",
        (puid, ids, *arrays),
    )


def _store_sampler(conn: Conn, batch: Batch, samples: Iterable[SampleRecord]) -> None:
    report = batch.sampler
    if report is not None:
        conn.execute(UPSERT_SAMPLER, (batch.puid, *dataclasses.astuple(sampler_record(report))))
    longest: dict[tuple[int, int], int] = {}
    for r in samples:
        key = (r.puid, r.tid)
        longest[key] = max(longest.get(key, 0), r.duration_ns)
    if longest:
        keys = sorted(longest)
        conn.execute(
            UPSERT_SAMPLE_THREADS,
            ([p for p, _ in keys], [t for _, t in keys], [longest[k] for k in keys]),
        )

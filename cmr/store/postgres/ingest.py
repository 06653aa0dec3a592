"""Writing one batch into PostgreSQL, in the caller's transaction.

The batch's key goes in first (``INSERT ... ON CONFLICT DO NOTHING`` on ``batches``): when two
nodes receive the same batch, the second waits there for the first to commit, then finds the
key and stores nothing. Event rows are streamed with binary COPY into temporary staging tables
and moved into the day-partitioned tables by one ``INSERT ... SELECT ... ON CONFLICT DO
NOTHING`` each, which computes every row's day and keeps the first write of an event key.

Rows other batches may write at the same time are locked in one order by every node — the
batch key, the process (and its methods, threads, frames), then sequences sorted by id — so two
nodes never wait on each other in a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec

from cmr.store._shared import EventRows, lost_rows
from cmr.store.base import SampleRecord
from cmr.store.postgres.connect import Conn
from cmr.store.postgres.partitions import day_of, day_sql
from cmr.store.postgres.schema import (
    UPSERT_COUNTERS,
    UPSERT_PROCESS,
    UPSERT_SAMPLE_THREADS,
    UPSERT_SAMPLER,
    UPSERT_SEQUENCES,
)
from tracer.wire import Batch

_encode = msgspec.msgpack.Encoder().encode


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


STARTS: Final = _Stage(
    "starts",
    (
        ("puid", "int8"),
        ("iid", "int8"),
        ("seq", "bytea"),
        ("parent", "int8"),
        ("hid", "int8"),
        ("tid", "int8"),
        ("method", "int8"),
        ("start_ns", "int8"),
    ),
    "start_ns",
)
ENDS: Final = _Stage(
    "ends", (("puid", "int8"), ("iid", "int8"), ("end_ns", "int8"), ("error", "text")), "end_ns"
)
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
STAGES: Final = (STARTS, ENDS, HANDOFFS, SAMPLES)


def create_stages(conn: Conn) -> None:
    """The staging tables of this connection (temporary: each connection has its own)."""
    for stage in STAGES:
        conn.execute(stage.create())


def needed_days(
    rows: EventRows, samples: list[SampleRecord], window: tuple[int, int]
) -> set[tuple[str, int]]:
    """The (table, day) partitions the batch's rows go to (asked only when one was missing)."""
    days = {("starts", day_of(r[7], window)) for r in rows.starts}
    days |= {("ends", day_of(r[2], window)) for r in rows.ends}
    days |= {("handoffs", day_of(r[6], window)) for r in rows.handoffs}
    days |= {("samples", day_of(r.t_ns, window)) for r in samples}
    return days


def write_batch(
    conn: Conn,
    batch: Batch,
    *,
    rows: EventRows,
    samples: list[SampleRecord],
    received_ns: int,
    window: tuple[int, int],
    node: int,
) -> bool:
    """Store the batch (False: it was stored before). Runs inside the caller's transaction."""
    events = rows.count
    cursor = conn.execute(
        "INSERT INTO batches VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (batch.puid, batch.batch_no, received_ns, events),
    )
    if cursor.rowcount == 0:
        conn.execute(UPSERT_COUNTERS, (node, 0, 1, 0, 0))
        return False
    _upsert_process(conn, batch, received_ns)
    _upsert_infos(conn, batch)
    if rows.first_start:
        ordered = sorted(rows.first_start.items())
        conn.execute(UPSERT_SEQUENCES, ([s for s, _ in ordered], [t for _, t in ordered]))
    window_params = {"lowest": window[0], "highest": window[1]}
    _move(conn, STARTS, rows.starts, window_params)
    _move(conn, ENDS, rows.ends, window_params)
    _move(conn, HANDOFFS, rows.handoffs, window_params)
    stored_samples = _move(
        conn,
        SAMPLES,
        [
            (r.puid, r.tid, r.t_ns, r.weight, r.duration_ns, r.cpu_ns, _encode((r.frames, r.lines)))
            for r in samples
        ],
        window_params,
    )
    _store_attributes(conn, batch, rows)
    if batch.lost_seqs:
        lost = lost_rows(batch)
        conn.execute(
            "INSERT INTO lost_seqs SELECT * FROM unnest(%s::bytea[], %s::bigint[]) "
            "ON CONFLICT DO NOTHING",
            ([seq for seq, _ in lost], [puid for _, puid in lost]),
        )
    _store_sampler(conn, batch, samples)
    conn.execute(UPSERT_COUNTERS, (node, 1, 0, events, stored_samples))
    return True


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
    unnest = ", ".join(f"%s::{_TYPES[column]}[]" for column in columns)
    updates = ", ".join(f"{column} = excluded.{column}" for column in columns)
    conn.execute(
        f"INSERT INTO {table} (puid, {key}, {', '.join(columns)}) "
        f"SELECT %s, * FROM unnest(%s::bigint[], {unnest}) ORDER BY 2 "
        f"ON CONFLICT (puid, {key}) DO UPDATE SET {updates}",
        (puid, ids, *arrays),
    )


def _store_attributes(conn: Conn, batch: Batch, rows: EventRows) -> None:
    """One row per invocation and batch; a key given twice in the batch keeps its latest value."""
    if not rows.attrs:
        return
    merged: dict[int, dict[str, str | int | float | bool]] = {}
    for _puid, iid, attributes in rows.attrs:
        merged.setdefault(iid, {}).update(attributes)
    iids = sorted(merged)
    conn.execute(
        "INSERT INTO attributes SELECT %s, iid, %s, attributes "
        "FROM unnest(%s::bigint[], %s::bytea[]) AS a (iid, attributes) "
        "ON CONFLICT DO NOTHING",
        (batch.puid, batch.batch_no, iids, [_encode(merged[iid]) for iid in iids]),
    )


def _store_sampler(conn: Conn, batch: Batch, samples: Iterable[SampleRecord]) -> None:
    report = batch.sampler
    if report is not None:
        conn.execute(
            UPSERT_SAMPLER,
            (
                batch.puid,
                report.mode,
                report.interval_ms,
                report.ticks,
                report.late_ticks,
                report.cost_ns,
            ),
        )
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

"""Case 8: ``cmr ls`` queries over many sequences, against the plain listing in the same store.

A repository of many one-call sequences (200 k; 20 k with ``--quick``): twenty root names, one
sequence in 1,000 lasting 500 ms (the rest 1 ms), one in 500 raising at its root. Each query
(``Store.list_sequences(20, query)``, what ``cmr ls`` runs after parsing) is timed in chunks
interleaved with the plain listing of the newest 20 (``cmr ls``), in SQLite, the memory store
and PostgreSQL (when ``INVOSEQ_TEST_PG`` is set; analysed once filled, as autovacuum would).
Served by indexes, a query costs a small multiple of the plain listing whatever the number of
sequences; a scan would cost it in proportion.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Final

from benchmarks import postgres
from benchmarks.harness import CaseResult, Row, Settings, interleave, median, spread
from cmr.store import Store, open_store
from cmr.store.base import SORT_DURATION, SequenceQuery
from invoseq import wire

NAME: Final = "listing"
MS: Final = 1_000_000
ROOTS: Final = 20
PER_BATCH: Final = 2_000
QUERIES: Final = {
    "plain": (None, "cmr ls"),
    "root+slow": (
        SequenceQuery(root="svc.endpoint8", min_duration_ns=400 * MS),
        "cmr ls --root svc.endpoint8 --min-duration 400",
    ),
    "slow": (SequenceQuery(min_duration_ns=400 * MS), "cmr ls --min-duration 400"),
    "error": (SequenceQuery(status="error"), "cmr ls --status error"),
    "longest": (SequenceQuery(sort=SORT_DURATION), "cmr ls --sort duration"),
    "pattern": (SequenceQuery(root="svc.endpoint1?"), "cmr ls --root 'svc.endpoint1?'"),
}


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    sequences = 20_000 if settings.quick else 200_000
    openers: dict[str, Callable[[], contextlib.AbstractContextManager[Store]]] = {
        "SQLite": lambda: _sqlite(settings),
        "memory": _memory,
    }
    server = postgres.server()
    if server:
        openers["PostgreSQL"] = lambda: _postgres(server)
    else:
        result.notes.append(f"PostgreSQL listing skipped: {postgres.PG_ENV} is not set")
    for store_name, opener in openers.items():
        with opener() as store:
            filled = time.perf_counter()
            _fill(store, sequences)
            fill_s = time.perf_counter() - filled
            if store_name == "PostgreSQL":
                _analyse(store)
            series = interleave(
                {key: _timed(store, query) for key, (query, _label) in QUERIES.items()},
                rounds=3 if settings.quick else 7,
                min_rounds=2,
                budget_s=settings.budget_s / len(openers),
            )
        result.raw[store_name] = {"sequences": sequences, "fill_s": fill_s, **series}
        result.noise[f"{store_name} plain"] = spread(series["plain"])
        plain = median(series["plain"])
        for key, (_query, label) in QUERIES.items():
            if key == "plain":
                continue
            took = median(series[key])
            result.rows.append(
                Row(
                    case=NAME,
                    name=f"{label}, {store_name}, {sequences:,} sequences",
                    value=took,
                    unit="s",
                    baseline=plain,
                    baseline_name="cmr ls (the newest 20) in the same store",
                    ratio=took / plain,
                    note=f"{len(series[key])} chunks",
                )
            )
    return result


def _timed(store: Store, query: SequenceQuery | None) -> Callable[[], float]:
    def chunk() -> float:
        started = time.perf_counter()
        if len(store.list_sequences(20, query)) != 20:
            raise RuntimeError("a listing query found fewer sequences than the data holds")
        return time.perf_counter() - started

    return chunk


def _fill(store: Store, sequences: int) -> None:
    methods = {m: f"svc.endpoint{m}" for m in range(1, ROOTS + 1)}
    infos = [wire.MethodInfo(m, "svc", f"endpoint{m}", "svc.py", m) for m in methods]
    process = wire.ProcessInfo(
        pid=1,
        host="bench",
        platform_id="bench",
        argv=["svc.py"],
        clock_offset_ns=0,
        started_ns=0,
        heartbeat_ms=0,
    )
    for batch_no in range(sequences // PER_BATCH):
        events: list[wire.Event] = []
        for i in range(PER_BATCH):
            k = batch_no * PER_BATCH + i
            at = (k + 1) * MS
            events.append(wire.Start(i + 1, 0, 0, k % ROOTS + 1, at, k.to_bytes(16, "big")))
            took = 500 * MS if k % 1000 == 7 else MS
            end = wire.Error(i + 1, at + took, "E") if k % 500 == 3 else wire.End(i + 1, at + took)
            events.append(end)
        batch = wire.Batch(
            puid=1,
            batch_no=batch_no + 1,
            process=process,
            methods=infos if not batch_no else [],
            threads=[wire.ThreadInfo(1, 1, "MainThread")],
            chunks=[wire.ThreadChunk(1, events)],
        )
        store.ingest(batch, 1)


@contextlib.contextmanager
def _sqlite(settings: Settings) -> Iterator[Store]:
    path = settings.workdir / "listing.sqlite"
    store = open_store(str(path))
    try:
        yield store
    finally:
        store.close()
        for leftover in settings.workdir.glob("listing.sqlite*"):
            leftover.unlink()


@contextlib.contextmanager
def _memory() -> Iterator[Store]:
    store = open_store(memory=True)
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def _postgres(server: str) -> Iterator[Store]:
    with postgres.scratch_schema(server) as url:
        store = open_store(url)
        try:
            yield store
        finally:
            store.close()


def _analyse(store: Store) -> None:
    """Statistics for PostgreSQL's planner, as autovacuum gathers them on a live repository."""
    import psycopg
    from psycopg import sql

    from cmr.store.postgres.store import PostgresStore

    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.url, autocommit=True) as conn:
        # this store's tables only: a bare ANALYZE visits every schema of the database, and a
        # table another run drops meanwhile fails it ("relation with OID ... does not exist")
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
        for (table,) in tables:
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))

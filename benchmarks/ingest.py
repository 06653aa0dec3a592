"""Case 2b: durable ingest, events per second, of pre-encoded batches into the repository.

What ``cmr serve`` does per message minus the socket: ``Ingest.handle_many`` (header check,
typed decode, each batch packed as it is decoded, the store's transaction, the acks), one batch
a transaction (a quiet repository) and
``GROUP_BATCHES`` a transaction (what ``cmr serve`` commits together when batches queue up:
``cmr/server/groups.py``). Into SQLite (the default store, WAL, synchronous=NORMAL, a fresh file
per chunk), memory and PostgreSQL, against the typed decode alone measured in the same rounds,
so the ratio says what storing costs on top of decoding.
Traffic: a busy service's (``synthetic.requests``: sequences of 111 calls over 4 threads),
in the sender's default batches of 4096 events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import msgspec

from benchmarks import postgres, synthetic
from benchmarks.harness import (
    CaseResult,
    Row,
    Settings,
    Target,
    interleave,
    median,
    median_error,
    spread,
)
from benchmarks.postgres import scratch_schema
from cmr.server.groups import GROUP_BATCHES
from cmr.server.ingest import Ingest
from cmr.store import Store, open_store
from invoseq import wire

NAME: Final = "ingest"
TARGETS: Final = (Target("first", ">=", 500_000), Target("final", ">=", 2_000_000))
#: Issue 18: durable ingest at half the typed decode's rate or better.
GROUPED_TARGETS: Final = (Target("issue 18", ">=", 0.5, on="ratio"),)
GROUPED: Final = (
    "durable ingest into {store}, " + str(GROUP_BATCHES) + " batches a transaction (group commit)"
)


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    events = 30_000 if settings.quick else 200_000
    traffic = synthetic.requests(puid=1, events=events)
    decoder = msgspec.msgpack.Decoder(wire.Batch)
    chunks = 0

    def decode_only() -> float:
        started = time.perf_counter()
        for _, body in traffic.frames:
            decoder.decode(body)
        return traffic.events / (time.perf_counter() - started)

    def ingest_into(opener: Callable[[], Store], group: int = 1) -> Callable[[], float]:
        """A chunk of the traffic into a fresh store, ``group`` batches a transaction."""

        def chunk() -> float:
            nonlocal chunks
            chunks += 1
            store = opener()
            try:
                ingest = Ingest(store)
                frames = traffic.frames
                started = time.perf_counter()
                for first in range(0, len(frames), group):
                    if None in ingest.handle_many(frames[first : first + group]):
                        raise RuntimeError("the repository rejected a synthetic batch")
                elapsed = time.perf_counter() - started
                if store.stats().events != traffic.events:
                    raise RuntimeError("the repository did not store every event")
                return traffic.events / elapsed
            finally:
                store.close()
                for path in settings.workdir.glob("ingest-*.sqlite*"):
                    path.unlink()

        return chunk

    def sqlite_store() -> Store:
        return open_store(str(settings.workdir / f"ingest-{chunks}.sqlite"))

    def memory_store() -> Store:
        return open_store(memory=True)

    variants: dict[str, Callable[[], float]] = {
        "decode": decode_only,
        "sqlite": ingest_into(sqlite_store),
        "sqlite-grouped": ingest_into(sqlite_store, GROUP_BATCHES),
        "memory": ingest_into(memory_store),
    }
    server = postgres.server()
    if server:
        variants["postgres"] = _postgres_chunk(server, ingest_into, 1)
        variants["postgres-grouped"] = _postgres_chunk(server, ingest_into, GROUP_BATCHES)
    else:
        result.notes.append(f"PostgreSQL ingest skipped: {postgres.PG_ENV} is not set")
    series = interleave(
        variants,
        rounds=3 if settings.quick else 12,
        min_rounds=2 if settings.quick else 3,
        budget_s=settings.budget_s,
    )
    result.raw = {"events_per_chunk": traffic.events, "batches": len(traffic.frames), **series}
    result.noise["decode"] = spread(series["decode"])
    decode = median(series["decode"])
    for variant, label, targets in (
        ("sqlite", "durable ingest into SQLite", TARGETS),
        ("sqlite-grouped", GROUPED.format(store="SQLite"), GROUPED_TARGETS),
        ("memory", "ingest into the memory store", ()),
        ("postgres", "durable ingest into PostgreSQL (one node)", ()),
        ("postgres-grouped", GROUPED.format(store="PostgreSQL (one node)"), ()),
    ):
        if variant not in series:
            continue
        rate = median(series[variant])
        result.rows.append(
            Row(
                case=NAME,
                name=label,
                value=rate,
                unit="events/s",
                baseline=decode,
                baseline_name="typed decode alone",
                ratio=rate / decode,
                targets=targets,
                error=median_error(series[variant]),
                note=(
                    f"{len(series[variant])} chunks of {traffic.events} events "
                    f"({len(traffic.frames)} batches); anchor: OTel Collector ≈ 12 k spans/s "
                    "per CPU (published)"
                    if variant == "sqlite"
                    else f"{len(series[variant])} chunks of {traffic.events} events"
                ),
            )
        )
    return result


def _postgres_chunk(
    server: str,
    ingest_into: Callable[[Callable[[], Store], int], Callable[[], float]],
    group: int,
) -> Callable[[], float]:
    """A chunk into a fresh schema of ``server`` (dropped after): one ``cmr serve`` node's
    ingest, ``group`` batches a committed transaction (synchronous_commit as the server has
    it)."""

    def chunk() -> float:
        with scratch_schema(server) as url:
            # The schema exists before timing starts; the first batch makes the day's
            # partitions, as a node's first batch of a day does.
            warm = open_store(url)
            warm.close()
            return ingest_into(lambda: open_store(url), group)()

    return chunk

"""The PostgreSQL repository's read side: a sequence's batches unpacked
(``cmr.store.stored_batches``), then the hand-offs, methods, threads and processes its invocations
name, and ``stats``; each run inside a transaction the caller holds (``PostgresStore``), with the
rules of ``rules``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from cmr.store._samples import (
    ThreadKey,
    Window,
    load_samplers,
    load_samples,
    sample_windows,
    without_gaps,
)
from cmr.store.base import (
    FrameRecord,
    HandoffRecord,
    InvocationRecord,
    MethodRecord,
    Neighbours,
    ProcessRecord,
    SampleRecord,
    SequenceData,
    StoreStats,
    ThreadRecord,
    UnknownSequenceError,
)
from cmr.store.columns import distinct_values, process_pairs, read_records
from cmr.store.postgres.connect import Conn
from cmr.store.postgres.statements import (
    LATE_ENDS,
    LOST_WINDOWS_OF,
    PROCESS_COLUMNS,
    SAMPLES_IN_WINDOW,
    SEQUENCE_BATCHES,
    SEQUENCE_HANDOFFS,
)
from cmr.store.rules import is_lost
from cmr.store.stored_batches import LateAttrs, LateEnd, StoredBatch
from cmr.store.summaries import BatchCache


def invocations(
    conn: Conn, seq: bytes, cache: BatchCache | None = None, *, batches: str = SEQUENCE_BATCHES
) -> Sequence[InvocationRecord]:
    """The sequence's invocations, from its batches (found by ``batches``: an upgrade reads a
    schema of its own version) and the late Ends and Attrs they lack."""

    def stored() -> Iterator[StoredBatch]:
        for puid, batch_no, offset, blob in conn.execute(batches, {"seq": seq}):
            yield puid, batch_no, offset, bytes(blob)

    def late_ends(keys: list[tuple[int, int]]) -> Iterator[LateEnd]:
        if keys:
            yield from conn.execute(LATE_ENDS, ([k[0] for k in keys], [k[1] for k in keys]))

    def late_attrs(puids: set[int]) -> Iterator[LateAttrs]:
        for puid, iid, batch_no, blob in conn.execute(
            "SELECT puid, iid, batch_no, attributes FROM late_attrs WHERE puid = ANY(%s)",
            (sorted(puids),),
        ):
            yield puid, iid, batch_no, bytes(blob)

    return read_records(seq, stored(), late_ends, late_attrs, cache)


def load(conn: Conn, seq: bytes, now: int, *, samples: bool) -> SequenceData:
    records = invocations(conn, seq)
    if not records:
        raise UnknownSequenceError(f"no sequence {seq.hex()}")
    continued = sorted(distinct_values(records, "hid") - {0})
    handoffs = {
        row[0]: HandoffRecord(*row)
        for row in conn.execute(SEQUENCE_HANDOFFS, {"seq": seq, "hids": continued})
    }
    wanted_methods, wanted_threads = process_pairs(records, "method", "tid")
    wanted_methods.update((h.puid, h.method) for h in handoffs.values())
    puids = sorted({puid for puid, _ in wanted_methods})
    methods = {
        (puid, method): MethodRecord(module, qualname, file, line)
        for puid, method, module, qualname, file, line in conn.execute(
            "SELECT puid, method, module, qualname, file, line FROM methods WHERE puid = ANY(%s)",
            (puids,),
        )
        if (puid, method) in wanted_methods
    }
    threads = {
        (puid, tid): ThreadRecord(native_id, name)
        for puid, tid, native_id, name in conn.execute(
            "SELECT puid, tid, native_id, name FROM threads WHERE puid = ANY(%s)", (puids,)
        )
        if (puid, tid) in wanted_threads
    }
    lost_windows = {
        int(puid): (int(first), int(last))
        for puid, first, last in conn.execute(LOST_WINDOWS_OF, {"seq": seq})
    }
    lost_by = frozenset(
        int(puid) for (puid,) in conn.execute("SELECT puid FROM lost_seqs WHERE seq = %s", (seq,))
    ).union(lost_windows)
    processes_by_puid = processes(
        conn, distinct_values(records, "puid") | {h.puid for h in handoffs.values()} | lost_by, now
    )
    sampled: list[SampleRecord] = []
    frames: dict[tuple[int, int], FrameRecord] = {}
    if samples:
        threads_sampled = {
            (puid, tid)
            for puid, tid in conn.execute(
                "SELECT puid, tid FROM sample_threads WHERE puid = ANY(%s)",
                (sorted(distinct_values(records, "puid")),),
            )
        }
        sampled, frames = _samples(conn, sample_windows(records, threads_sampled))
    sampled, gaps = without_gaps(sampled)
    return SequenceData(
        seq, records, methods, threads, processes_by_puid, handoffs, sampled, frames, lost_by,
        gaps=gaps, lost_windows=lost_windows,
    )  # fmt: skip


def processes(conn: Conn, puids: Iterable[int], now: int) -> dict[int, ProcessRecord]:
    return {
        row[0]: process_record(row, now)
        for row in conn.execute(
            f"SELECT {PROCESS_COLUMNS} FROM processes WHERE puid = ANY(%s)", (sorted(set(puids)),)
        )
    }


def stats(conn: Conn, now: int) -> StoreStats:
    batches, duplicates, events, samples = _one(
        conn,
        "SELECT coalesce(sum(batches), 0), coalesce(sum(duplicate_batches), 0), "
        "coalesce(sum(events), 0), coalesce(sum(samples), 0) FROM counters",
    )
    rejected = {
        str(reason): int(frames)
        for reason, frames in conn.execute("SELECT reason, frames FROM rejected ORDER BY reason")
    }
    processes = [
        process_record(row, now)
        for row in conn.execute(
            f"SELECT {PROCESS_COLUMNS} FROM processes ORDER BY last_seen_ns DESC, puid"
        )
    ]
    samplers = load_samplers(conn.execute)
    return StoreStats(
        batches=int(batches),
        duplicate_batches=int(duplicates),
        events=int(events),
        rejected=rejected,
        processes=processes,
        samples=int(samples),
        samplers=samplers,
    )


def process_record(row: Any, now: int) -> ProcessRecord:
    puid, pid, host, platform_id, argv, ended, dropped, last_seen_ns, heartbeat_ms = row
    return ProcessRecord(
        puid=puid,
        pid=pid,
        host=host,
        platform_id=platform_id,
        argv=tuple(argv),
        ended=bool(ended),
        dropped=dropped,
        last_seen_ns=last_seen_ns,
        heartbeat_ms=heartbeat_ms,
        lost=is_lost(
            ended=bool(ended), heartbeat_ms=heartbeat_ms, last_seen_ns=last_seen_ns, now_ns=now
        ),
    )


def _samples(
    conn: Conn, windows: dict[ThreadKey, list[Window]]
) -> tuple[list[SampleRecord], dict[tuple[int, int], FrameRecord]]:
    return load_samples(conn.execute, windows, mark="%s", in_window_sql=SAMPLES_IN_WINDOW)


def _one(conn: Conn, query: str, params: dict[str, Any] | None = None) -> Any:
    row = conn.execute(query, params).fetchone()
    if row is None:  # pragma: no cover - every query here aggregates or has a row
        raise UnknownSequenceError("the repository gave no answer")
    return row


#: Each id of ``%(seqs)s`` with its neighbours in id order: one statement, a step each way in
#: the primary key's index per id.
NEIGHBOURS = """
    SELECT w.seq,
        (SELECT s.seq FROM sequences s WHERE s.seq < w.seq ORDER BY s.seq DESC LIMIT 1),
        (SELECT s.seq FROM sequences s WHERE s.seq > w.seq ORDER BY s.seq LIMIT 1)
    FROM unnest(%(seqs)s::bytea[]) AS w(seq)
"""


def neighbours(conn: Conn, seqs: Sequence[bytes]) -> dict[bytes, Neighbours]:
    """``Store.neighbours``: the ids just below and just above each of ``seqs``."""
    return {
        bytes(seq): (
            None if below is None else bytes(below),
            None if above is None else bytes(above),
        )
        for seq, below, above in conn.execute(NEIGHBOURS, {"seqs": list(seqs)})
    }

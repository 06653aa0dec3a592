"""The PostgreSQL repository's read side: the queries behind ``ls``, ``show`` and ``stats``, each
run inside a transaction the caller holds (``PostgresStore``), with the rules of ``_shared``."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from cmr.store._samples import (
    ThreadKey,
    Window,
    load_samplers,
    load_samples,
    sample_windows,
)
from cmr.store._shared import (
    RemoteEntries,
    RootCandidate,
    is_lost,
    qualified_name,
    sequence_status,
    summary_root,
)
from cmr.store.base import (
    FrameRecord,
    HandoffRecord,
    InvocationRecord,
    MethodRecord,
    ProcessRecord,
    SampleRecord,
    SequenceData,
    SequenceSummary,
    StoreStats,
    ThreadRecord,
    UnknownSequenceError,
)
from cmr.store.postgres.connect import Conn
from cmr.store.postgres.schema import (
    ATTRIBUTES,
    COUNTS,
    INVOCATIONS,
    LOSSY,
    PROCESS_COLUMNS,
    REMOTE_ENTRIES,
    ROOT,
    SAMPLES_IN_WINDOW,
    WITH_HANDOFFS,
)

AttributeDict = dict[str, str | int | float | bool]
_decode_attributes: Final = msgspec.msgpack.Decoder(AttributeDict).decode


def summary(conn: Conn, seq: bytes, start_ns: int, now: int) -> SequenceSummary:
    params = {"seq": seq, "now": now}
    invocations, threads, processes, running, incomplete = _one(conn, COUNTS, params)
    parent, hid, method, end_ns, module, qualname = _one(conn, ROOT, params)
    best = RootCandidate(parent, hid, qualified_name(module, qualname, method), end_ns)
    remote = RemoteEntries(0, 0, None)
    if parent or hid:  # only a sequence without a true root looks for remote entries
        remote = RemoteEntries(*_one(conn, REMOTE_ENTRIES, params))
    root, root_end_ns = summary_root(best, remote)
    lossy = conn.execute(LOSSY, params).fetchone() is not None
    return SequenceSummary(
        seq=seq,
        root=root,
        start_ns=start_ns,
        end_ns=root_end_ns,
        invocations=invocations,
        threads=threads,
        processes=processes,
        status=sequence_status(running, incomplete),
        lossy=lossy,
    )


def load(conn: Conn, seq: bytes, now: int, *, samples: bool) -> SequenceData:
    params = {"seq": seq}
    attributes = _attributes(conn, params)
    invocations = [
        InvocationRecord(
            puid,
            iid,
            parent,
            hid,
            tid,
            method,
            start_ns,
            end_ns,
            error,
            attributes=attributes.get((puid, iid)),
        )
        for puid, iid, parent, hid, tid, method, start_ns, end_ns, error in conn.execute(
            INVOCATIONS, params
        )
    ]
    if not invocations:
        raise UnknownSequenceError(f"no sequence {seq.hex()}")
    invocations.sort(key=lambda r: (r.start_ns, r.puid, r.iid))
    handoffs = {
        row[0]: HandoffRecord(*row)
        for row in conn.execute(f"{WITH_HANDOFFS} SELECT * FROM seq_handoffs", params)
    }
    methods = {
        (puid, method): MethodRecord(module, qualname, file, line)
        for puid, method, module, qualname, file, line in conn.execute(
            f"{WITH_HANDOFFS} SELECT puid, method, module, qualname, file, line FROM methods "
            "WHERE (puid, method) IN (SELECT puid, method FROM starts WHERE seq = %(seq)s "
            "UNION SELECT puid, method FROM seq_handoffs)",
            params,
        )
    }
    threads = {
        (puid, tid): ThreadRecord(native_id, name)
        for puid, tid, native_id, name in conn.execute(
            "SELECT puid, tid, native_id, name FROM threads "
            "WHERE (puid, tid) IN (SELECT puid, tid FROM starts WHERE seq = %(seq)s)",
            params,
        )
    }
    lost_by = frozenset(
        puid for (puid,) in conn.execute("SELECT puid FROM lost_seqs WHERE seq = %(seq)s", params)
    )
    processes = {
        row[0]: process_record(row, now)
        for row in conn.execute(
            f"{WITH_HANDOFFS} SELECT {PROCESS_COLUMNS} FROM processes WHERE puid IN "
            "(SELECT puid FROM starts WHERE seq = %(seq)s "
            "UNION SELECT puid FROM seq_handoffs "
            "UNION SELECT puid FROM lost_seqs WHERE seq = %(seq)s)",
            params,
        )
    }
    sampled: list[SampleRecord] = []
    frames: dict[tuple[int, int], FrameRecord] = {}
    if samples:
        threads_sampled = {
            (puid, tid)
            for puid, tid in conn.execute(
                "SELECT puid, tid FROM sample_threads WHERE puid = ANY(%s)",
                (sorted({r.puid for r in invocations}),),
            )
        }
        sampled, frames = _samples(conn, sample_windows(invocations, threads_sampled))
    return SequenceData(
        seq, invocations, methods, threads, processes, handoffs, sampled, frames, lost_by
    )


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


def _attributes(conn: Conn, params: dict[str, Any]) -> dict[tuple[int, int], AttributeDict]:
    """Per invocation, its attributes merged in batch order: a later value of a key wins."""
    merged: dict[tuple[int, int], AttributeDict] = {}
    for puid, iid, encoded in conn.execute(ATTRIBUTES, params):
        merged.setdefault((puid, iid), {}).update(_decode_attributes(encoded))
    return merged


def _samples(
    conn: Conn, windows: dict[ThreadKey, list[Window]]
) -> tuple[list[SampleRecord], dict[tuple[int, int], FrameRecord]]:
    return load_samples(conn.execute, windows, mark="%s", in_window_sql=SAMPLES_IN_WINDOW)


def _one(conn: Conn, query: str, params: dict[str, Any] | None = None) -> Any:
    row = conn.execute(query, params).fetchone()
    if row is None:  # pragma: no cover - every query here aggregates or has a row
        raise UnknownSequenceError("the repository gave no answer")
    return row

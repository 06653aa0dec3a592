"""Moving a version 1-5 repository's event rows into the packed form of version 6.

Those versions kept a row per Start (``starts``) and per End (``ends``), in wall-clock time. Each
process's rows become one stored batch, numbered far above any batch a process sends
(``LEGACY_BATCH_NO``), whose clock offset is 0 (its times are already wall clock) and whose
index is built as ingest builds it; Ends whose Start was never stored become late Ends. The row
tables are then dropped. Runs inside the upgrade's transaction: it happens whole or not at all.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from cmr.store.packed import encode_chunks, methods_by_seq
from tracer.wire import End, Error, Event, Start, ThreadChunk

#: The batch number of the batch holding a process's rows from before version 6.
LEGACY_BATCH_NO: Final = 2**62


def move_legacy_rows(conn: sqlite3.Connection) -> None:
    """Move ``starts``/``ends`` rows into stored batches, then drop those tables (if any)."""
    exists = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'starts'"
    ).fetchone()[0]
    if not exists:
        return
    puids = [puid for (puid,) in conn.execute("SELECT DISTINCT puid FROM starts ORDER BY puid")]
    for puid in puids:
        _move_process(conn, puid)
    conn.execute(
        "INSERT OR IGNORE INTO late_ends SELECT e.puid, e.iid, e.end_ns, e.error FROM ends e "
        "WHERE NOT EXISTS (SELECT 1 FROM starts s WHERE s.puid = e.puid AND s.iid = e.iid)"
    )
    conn.execute("DROP TABLE starts")
    conn.execute("DROP TABLE ends")


def _move_process(conn: sqlite3.Connection, puid: int) -> None:
    by_thread: dict[int, list[Event]] = {}
    seqs: set[bytes] = set()
    seq_methods: set[tuple[bytes, int]] = set()
    events = 0
    for iid, seq, parent, hid, tid, method, start_ns, end_ns, error in conn.execute(
        "SELECT s.iid, s.seq, s.parent, s.hid, s.tid, s.method, s.start_ns, e.end_ns, e.error "
        "FROM starts s LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid "
        "WHERE s.puid = ? ORDER BY s.tid, s.start_ns, s.iid",
        (puid,),
    ):
        chunk = by_thread.setdefault(tid, [])
        chunk.append(Start(iid, parent, hid, method, start_ns, seq))
        events += 1
        if end_ns is not None:
            chunk.append(Error(iid, end_ns, error) if error is not None else End(iid, end_ns))
            events += 1
        seqs.add(seq)
        seq_methods.add((seq, method))
    (last_seen_ns,) = conn.execute(
        "SELECT coalesce(max(last_seen_ns), 0) FROM processes WHERE puid = ?", (puid,)
    ).fetchone()
    chunks = [ThreadChunk(tid, chunk) for tid, chunk in sorted(by_thread.items())]
    conn.execute(
        "INSERT INTO batches VALUES (?, ?, ?, ?, 0, ?)",
        (puid, LEGACY_BATCH_NO, last_seen_ns, events, encode_chunks(chunks)),
    )
    conn.executemany(
        "INSERT OR IGNORE INTO batch_seqs VALUES (?, ?, ?)",
        [(seq, puid, LEGACY_BATCH_NO) for seq in sorted(seqs)],
    )
    conn.executemany(
        "INSERT OR IGNORE INTO seq_methods VALUES (?, ?, ?, ?)",
        [
            (seq, puid, LEGACY_BATCH_NO, methods)
            for seq, methods in methods_by_seq(seq_methods).items()
        ],
    )

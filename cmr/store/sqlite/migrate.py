"""Moving a version 1-5 repository's event rows into the packed form of version 6.

Those versions kept a row per Start (``starts``) and per End (``ends``), in wall-clock time. Each
process's rows become one stored batch, numbered far above any batch a process sends
(``stored_batches.LEGACY_BATCH_NO``), whose clock offset is 0 (its times are already wall clock)
and whose index is built as ingest builds it; Ends whose Start was never stored become late Ends.
The row tables are then dropped. Runs inside the upgrade's transaction: it happens whole or not at
all."""

from __future__ import annotations

import sqlite3

from cmr.store.sqlite.writes import write_index
from cmr.store.stored_batches import LEGACY_BATCH_NO, legacy_batch


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
    moved = legacy_batch(
        conn.execute(
            "SELECT s.iid, s.seq, s.parent, s.hid, s.tid, s.method, s.start_ns, e.end_ns, e.error "
            "FROM starts s LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid "
            "WHERE s.puid = ?",
            (puid,),
        )
    )
    (last_seen_ns,) = conn.execute(
        "SELECT coalesce(max(last_seen_ns), 0) FROM processes WHERE puid = ?", (puid,)
    ).fetchone()
    conn.execute(
        "INSERT INTO batches VALUES (?, ?, ?, ?, 0, ?)",
        (puid, LEGACY_BATCH_NO, last_seen_ns, moved.events, moved.chunks),
    )
    write_index(conn, puid, LEGACY_BATCH_NO, moved.seqs, moved.seq_methods)

"""Moving a version 1-2 PostgreSQL repository's event rows into the stored batches of version 3.

Those versions kept a row per Start (``starts``), per End (``ends``) and per invocation's
attributes (``attributes``), partitioned by day. Each process's rows become one stored batch,
numbered ``stored_batches.LEGACY_BATCH_NO`` with clock offset 0 (the times are wall clock already)
and indexed as ingest indexes a batch; Ends whose Start was never stored become late Ends and every
attributes row a late Attrs (merged in batch order when read, as before). The row tables are
then dropped; the listing lines are computed by the migration after it (``postgres_migrate``),
once every column they need is there. Runs inside the migration's transaction: it happens
whole or not at all.
"""

from __future__ import annotations

from typing import Final

import msgspec

from cmr.store.postgres.connect import Conn
from cmr.store.stored_batches import LEGACY_BATCH_NO, encode_attributes, legacy_batch

_decode_attributes: Final = msgspec.msgpack.Decoder(dict[str, str | int | float | bool]).decode
#: The first write of an event key wins: the earliest day's row of a key, as readers took it.
_PROCESS_ROWS: Final = """
    SELECT DISTINCT ON (s.iid)
           s.iid, s.seq, s.parent, s.hid, s.tid, s.method, s.start_ns, e.end_ns, e.error
    FROM starts s LEFT JOIN ends e ON e.puid = s.puid AND e.iid = s.iid
    WHERE s.puid = %s
    ORDER BY s.iid, s.day, e.day"""


def move_legacy_rows(conn: Conn) -> None:
    """Move the row tables' events into stored batches and drop those tables."""
    puids = [int(p) for (p,) in conn.execute("SELECT DISTINCT puid FROM starts ORDER BY puid")]
    for puid in puids:
        _move_process(conn, puid)
    conn.execute(
        "INSERT INTO late_ends "
        "SELECT DISTINCT ON (e.puid, e.iid) e.puid, e.iid, e.end_ns, e.error FROM ends e "
        "WHERE NOT EXISTS (SELECT 1 FROM starts s WHERE s.puid = e.puid AND s.iid = e.iid) "
        "ORDER BY e.puid, e.iid, e.day"
    )
    attributes = conn.execute("SELECT puid, iid, batch_no, attributes FROM attributes").fetchall()
    if attributes:
        conn.execute(
            "INSERT INTO late_attrs SELECT * FROM unnest("
            "%s::bigint[], %s::bigint[], %s::bigint[], %s::bytea[])",
            (
                [row[0] for row in attributes],
                [row[1] for row in attributes],
                [row[2] for row in attributes],
                [encode_attributes(_decode_attributes(row[3])) for row in attributes],
            ),
        )
    for table in ("attributes", "ends", "starts"):
        conn.execute(f"DROP TABLE {table}")


def _move_process(conn: Conn, puid: int) -> None:
    moved = legacy_batch(conn.execute(_PROCESS_ROWS, (puid,)))
    row = conn.execute(
        "SELECT coalesce(max(last_seen_ns), 0) FROM processes WHERE puid = %s", (puid,)
    ).fetchone()
    last_seen_ns = int(row[0]) if row else 0
    conn.execute(
        "INSERT INTO batches (puid, batch_no, received_ns, events, clock_offset_ns, chunks) "
        "VALUES (%s, %s, %s, %s, 0, %s)",
        (puid, LEGACY_BATCH_NO, last_seen_ns, moved.events, moved.chunks),
    )
    conn.execute(
        "INSERT INTO batch_seqs SELECT seq, %s, %s FROM unnest(%s::bytea[]) AS s (seq)",
        (puid, LEGACY_BATCH_NO, moved.seqs),
    )
    seqs = sorted(moved.seq_methods)
    conn.execute(
        "INSERT INTO seq_methods SELECT m.seq, %s, %s, m.methods "
        "FROM unnest(%s::bytea[], %s::bytea[]) AS m (seq, methods)",
        (puid, LEGACY_BATCH_NO, seqs, [moved.seq_methods[seq] for seq in seqs]),
    )

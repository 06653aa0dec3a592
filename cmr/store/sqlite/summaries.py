"""The SQLite backend's sequence summaries (``cmr.store.summaries``): kept at ingest, read by
index for a listing, and computed once for the sequences of a file stored without them. On a
connection inside a transaction the caller holds (``SQLiteStore``)."""

from __future__ import annotations

import sqlite3

from cmr.store import block_pages
from cmr.store.base import MethodRecord, SequenceQuery, SequenceSummary
from cmr.store.listing import PageKey, PageKind
from cmr.store.listing_sql import SQLITE, Plan, key_params, picked
from cmr.store.sqlite import blocks
from cmr.store.sqlite import read as sqlite_read
from cmr.store.sqlite.statements import (
    LATE_ROOT_END,
    LISTING_KEYS,
    LOSSY,
    OPEN_CALL,
    REMOTE_ENTRIES,
    SUMMARIES_OF_PICKED,
    THREAD_COUNTS,
    UPSERT_ROOT,
    UPSERT_SEQUENCE,
)
from cmr.store.summaries import (
    StoredSummary,
    SummaryParts,
    backfilled,
    summary_from,
    waiting_on,
)

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # the write side's (a listing reads summaries without the ingest machinery)
    from cmr.store.grouping import GroupParts


def store(conn: sqlite3.Connection, group: GroupParts) -> None:
    """Add the parts of the batches a transaction stored (``grouping.group_parts``, without the
    sequences stored as single rows: ``writes.GroupPlan``), after their late Ends are stored
    (they close open invocations, and set the end of a sequence whose root they end). Each
    sequence is written last, once, with its listing keys from its root candidate as it now
    stands."""
    parts = group.summary
    counts = parts.counts
    if group.late_ends:
        conn.executemany(
            LATE_ROOT_END,
            [
                {"puid": puid, "iid": iid, "end": end, "error": error}
                for puid, iid, end, error in group.late_ends
            ],
        )
        conn.executemany(
            "DELETE FROM open_calls WHERE puid = ? AND iid = ?",
            [(puid, iid) for puid, iid, _end, _error in group.late_ends],
        )
    parts.roots.sort()  # rows in key order land on pages in order (``writes._index_rows``)
    _store_parts(conn, parts)
    first_start = group.first_start
    sequences = [
        {
            "seq": seq,
            "start": first_start[seq],
            "count": counts[seq],
            "decided": not (untrue or handed),
            "puid": puid,
            "iid": iid,
            "method": method,
            "end": end,
            "error": error,
        }
        for seq, untrue, handed, _start, puid, iid, method, end, error in parts.roots
    ]
    conn.executemany(UPSERT_SEQUENCE, sequences)


def _store_parts(conn: sqlite3.Connection, parts: SummaryParts) -> None:
    conn.executemany(UPSERT_ROOT, parts.roots)
    conn.executemany("INSERT OR IGNORE INTO seq_threads VALUES (?, ?, ?)", sorted(parts.threads))
    if parts.entries:
        conn.executemany("INSERT OR IGNORE INTO seq_entries VALUES (?, ?, ?, ?, ?)", parts.entries)
    if parts.opened:
        conn.executemany(
            OPEN_CALL, [{"puid": puid, "iid": iid, "seq": seq} for puid, iid, seq in parts.opened]
        )


def page(
    kind: PageKind,
    key: PageKey,
    size: int,
    *,
    conn: sqlite3.Connection,
    query: SequenceQuery | None,
    plan: Plan,
    now: int,
) -> list[SequenceSummary]:
    """A page of listing lines (``listing.Page``): a few lookups each."""
    stored: list[StoredSummary] = []
    picked_sql, params = picked(kind, query, plan, SQLITE)
    params |= key_params(key, size)
    singles = block_pages.page(conn.execute, blocks.LAYOUT, kind, key, size, query=query, plan=plan)
    if singles:  # the page's first ``size`` of the rows and the single rows read by blocks
        picked_sql, params = block_pages.merged(
            conn.execute, SQLITE, kind, size, sql_page=(picked_sql, params), singles=singles
        )
    for row in conn.execute(SUMMARIES_OF_PICKED.format(picked=picked_sql), params).fetchall():
        seq, start_ns, invocations, *root, module, qualname, file, line, single = row
        root_row = (seq, *root)
        threads, processes = (1, 1) if single else conn.execute(THREAD_COUNTS, (seq,)).fetchone()
        (lossy,) = conn.execute(LOSSY, {"seq": seq}).fetchone()
        untrue, handed = root[0], root[1]
        remote = conn.execute(REMOTE_ENTRIES, (seq,)).fetchall() if untrue or handed else []
        stored.append(
            StoredSummary(
                seq=seq,
                start_ns=start_ns,
                invocations=invocations,
                root=root_row,
                root_method=MethodRecord(module, qualname, file, line) if qualname else None,
                threads=threads,
                processes=processes,
                remote_entries=[(puid, end) for puid, end in remote],
                lossy=bool(lossy),
            )
        )
    puids = {puid for s in stored for puid in waiting_on(s)}
    processes_by_puid = sqlite_read.processes(conn, puids, now)
    return [summary_from(s, processes_by_puid) for s in stored]


def backfill(conn: sqlite3.Connection) -> None:
    """Compute the summaries of every stored sequence (upgrading a file from before them)."""
    seqs = [seq for (seq,) in conn.execute("SELECT seq FROM sequences ORDER BY seq").fetchall()]
    for seq, invocations, parts in backfilled(
        seqs, lambda seq, cache: sqlite_read.invocations(conn, seq, cache)
    ):
        conn.execute("UPDATE sequences SET invocations = ? WHERE seq = ?", (invocations, seq))
        _store_parts(conn, parts)


def backfill_keys(conn: sqlite3.Connection) -> None:
    """Every sequence's listing keys from its stored root candidate (upgrading a file)."""
    conn.execute(LISTING_KEYS)

"""The PostgreSQL backend's sequence summaries (``cmr.store.summaries``): kept at ingest, read by
index for a listing (one query for the lines, two for what they share), and computed once for
the sequences of a repository upgraded from rows. On a connection inside a transaction the
caller holds (``PostgresStore``); rows other nodes may write too are sent sorted by key, so two
nodes lock them in one order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from cmr.store import block_pages
from cmr.store.base import MethodRecord, SequenceQuery, SequenceSummary
from cmr.store.grouping import GroupParts
from cmr.store.listing import PageKey, PageKind
from cmr.store.listing_sql import POSTGRES, Plan, key_params, picked
from cmr.store.postgres import blocks, single
from cmr.store.postgres import read as postgres_read
from cmr.store.postgres.binary import column
from cmr.store.postgres.connect import Conn, arrays
from cmr.store.postgres.statements import (
    OPEN_CALLS,
    REMOTE_ENTRIES,
    SIDE_TABLE_BATCHES,
    SUMMARIES_OF_PICKED,
    UPSERT_ROOTS,
    UPSERT_SEQUENCES,
)
from cmr.store.summaries import (
    StoredSummary,
    SummaryParts,
    backfilled,
    summary_from,
    waiting_on,
)

#: The columns of a sequence's row ``UPSERT_SEQUENCES`` binds: seq, start, count, decided, and
#: its root candidate's puid, iid, method, end and error.
_SEQUENCE_COLUMNS: Final = 9


def store(conn: Conn, group: GroupParts) -> None:
    """Add the parts of the batches a transaction stored (``grouping.group_parts``, cut to the
    sequences not stored as single rows: ``grouping.only``, ``cmr.store.postgres.single``);
    their late Ends are stored already. Each sequence, and each whose open root a late End
    ends, is written last, once, with its listing keys from its root candidate as it now stands
    (rows locked in one order: ``UPSERT_SEQUENCES``). A single row stored before that the group
    brings more of is moved to the side tables, and its row written then. Then the late Ends
    close the invocations they end."""
    parts = group.summary
    store_parts(conn, parts)
    first_start, counts = group.first_start, parts.counts
    sequences = [
        (seq, first_start[seq], counts[seq], int(not (untrue or handed)), *candidate)
        for seq, untrue, handed, _start, *candidate in sorted(parts.roots)
    ]
    late_puids = [row[0] for row in group.late_ends]
    late_iids = [row[1] for row in group.late_ends]
    left = _upsert_sequences(conn, sequences, late_puids, late_iids)
    if left:  # single rows stored before: to the side tables, then written as the others
        single.spread(conn, left)
        again = set(left)
        _upsert_sequences(conn, [row for row in sequences if row[0] in again], [], [])
    if late_puids:
        conn.execute(
            "DELETE FROM open_calls o USING unnest(%b::bigint[], %b::bigint[]) AS k (puid, iid) "
            "WHERE o.puid = k.puid AND o.iid = k.iid",
            (column(late_puids), column(late_iids)),
        )


def _upsert_sequences(
    conn: Conn, sequences: Sequence[tuple[object, ...]], late_puids: list[int], late_iids: list[int]
) -> list[bytes]:
    """``UPSERT_SEQUENCES``: the ids of the single rows it left alone, sorted."""
    left = conn.execute(
        UPSERT_SEQUENCES,
        (
            *(arrays(sequences) if sequences else [[]] * _SEQUENCE_COLUMNS),
            column(late_puids),
            column(late_iids),
        ),
    ).fetchall()
    return sorted(bytes(seq) for (seq,) in left)


def store_parts(conn: Conn, parts: SummaryParts) -> None:
    if parts.roots:
        roots = sorted(parts.roots, key=lambda row: row[0])
        conn.execute(UPSERT_ROOTS, arrays(roots))
    if parts.threads:
        threads = sorted(parts.threads)
        conn.execute(
            "INSERT INTO seq_threads SELECT * FROM unnest(%b::bytea[], %b::bigint[], %b::bigint[])"
            " ORDER BY 1, 2, 3 ON CONFLICT DO NOTHING",
            arrays(threads),
        )
    if parts.entries:
        entries = sorted(parts.entries, key=lambda row: row[:3])
        conn.execute(
            "INSERT INTO seq_entries SELECT * FROM unnest(%b::bytea[], %b::bigint[], "
            "%b::bigint[], %b::bigint[], %b::bigint[]) ORDER BY 1, 2, 3 ON CONFLICT DO NOTHING",
            arrays(entries),
        )
    if parts.opened:
        conn.execute(OPEN_CALLS, arrays(parts.opened))


def page(
    kind: PageKind,
    key: PageKey,
    size: int,
    *,
    conn: Conn,
    query: SequenceQuery | None,
    plan: Plan,
    now: int,
) -> list[SequenceSummary]:
    """A page of listing lines (``listing.Page``): three queries in all."""
    picked_sql, params = picked(kind, query, plan, POSTGRES)
    params |= key_params(key, size)
    singles = block_pages.page(conn.execute, blocks.LAYOUT, kind, key, size, query=query, plan=plan)
    if singles:  # the page's first ``size`` of the rows and the single rows read by blocks
        picked_sql, params = block_pages.merged(
            conn.execute, POSTGRES, kind, size, sql_page=(picked_sql, params), singles=singles
        )
    rows = conn.execute(SUMMARIES_OF_PICKED.format(picked=picked_sql), params).fetchall()
    remote: dict[bytes, list[tuple[int, int | None]]] = {}
    without_true_root = [bytes(row[0]) for row in rows if row[3] or row[4]]
    if without_true_root:
        for seq, puid, end_ns in conn.execute(REMOTE_ENTRIES, {"seqs": without_true_root}):
            remote.setdefault(bytes(seq), []).append((int(puid), end_ns))
    stored: list[StoredSummary] = []
    for row in rows:
        seq_value, start_ns, invocations, *root, module, qualname, file, line = row[:15]
        threads, processes, lossy = row[15:]
        seq = bytes(seq_value)
        stored.append(
            StoredSummary(
                seq=seq,
                start_ns=start_ns,
                invocations=int(invocations),
                root=(seq, *root),
                root_method=MethodRecord(module, qualname, file, line) if qualname else None,
                threads=int(threads),
                processes=int(processes),
                remote_entries=remote.get(seq, []),
                lossy=bool(lossy),
            )
        )
    puids = {puid for s in stored for puid in waiting_on(s)}
    processes_by_puid = postgres_read.processes(conn, puids, now)
    return [summary_from(s, processes_by_puid) for s in stored]


def backfill(conn: Conn) -> None:
    """Compute the summaries of every stored sequence (upgrading a repository from before them,
    or before their roots said what they raised: the roots are computed again)."""
    conn.execute("DELETE FROM seq_roots")
    rows = conn.execute("SELECT seq FROM sequences ORDER BY seq").fetchall()
    for seq, invocations, parts in backfilled(
        [bytes(seq) for (seq,) in rows],
        lambda seq, cache: postgres_read.invocations(conn, seq, cache, batches=SIDE_TABLE_BATCHES),
    ):
        conn.execute("UPDATE sequences SET invocations = %s WHERE seq = %s", (invocations, seq))
        store_parts(conn, parts)

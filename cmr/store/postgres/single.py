"""Request-shaped sequences stored as one row each in PostgreSQL (migration 10,
``schema.SINGLE_ROWS``), by ``cmr.store.single_rows``' rule, as in SQLite: a single-row sequence
costs its ``sequences`` row, its entries in the primary key and the index by batch, and no row
in ``seq_roots``, ``seq_threads`` or ``batch_seqs`` (issue 33, goal 6); the listing indexes hold
no single row, which are listed by their batches' blocks (migration 11, ``blocks``).

A group's single rows are inserted first (``insert``, sorted by id, ``ON CONFLICT DO NOTHING``:
one stored before, or being stored by another node, is not a single row, and the group writes it
to the side tables). A single-row sequence that a later group brings more of is found where that
group updates its ``sequences`` row: the update leaves a single row alone and says so
(``statements.UPSERT_SEQUENCES``), and the group moves it to the side tables (``spread``) before
updating it. That is where the row is locked and its latest committed version is seen, so a
single row another node committed a moment before is found too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Final

import psycopg

from cmr.store.postgres.connect import Conn, arrays
from cmr.store.postgres.statements import EARLIER_ROOT_UPDATE, METHOD_NAME_OF
from cmr.store.single_rows import SingleRow, Written, singles

#: The group's single rows, sorted by id (the order every node locks sequence rows in): their
#: listing keys as ``UPSERT_SEQUENCES`` sets those of a new decided sequence (the root's name
#: looked up), and their own columns.
_INSERT_SINGLES: Final = f"""
    INSERT INTO sequences (
        seq, start_ns, invocations, root_name, end_ns, error,
        one_puid, one_tid, one_iid, one_method, one_batch, one_methods)
    SELECT s.seq, s.start_ns, s.invocations, {METHOD_NAME_OF.format(row="s")},
        s.end_ns, s.error, s.one_puid, s.one_tid, s.one_iid, s.one_method, s.one_batch,
        s.one_methods
    FROM unnest(%b::bytea[], %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[],
                %b::bigint[], %b::text[], %b::bigint[], %b::bigint[], %b::bigint[],
                %b::bigint[], %b::bigint[], %b::bytea[])
        AS s (seq, start_ns, invocations, puid, method, end_ns, error,
              one_puid, one_tid, one_iid, one_method, one_batch, one_methods)
    ORDER BY 1"""
#: ``INSERT_NEW_SINGLES`` returns the ids inserted and fails on one stored before;
#: ``INSERT_SINGLES`` skips those (``ON CONFLICT``).
INSERT_NEW_SINGLES: Final = f"{_INSERT_SINGLES}\n    RETURNING seq"
INSERT_SINGLES: Final = f"{_INSERT_SINGLES}\n    ON CONFLICT (seq) DO NOTHING\n    RETURNING seq"
#: The blocks of the single rows just inserted (``cmr.store.block_pages``: here a block is a
#: batch's single rows): each batch's (``%b`` arrays: puid, batch_no, first start, last start,
#: longest duration), then each batch's zone per root method (puid, batch_no, method, last
#: start, longest duration), by the method's name; both merged into any the batch has (none: a
#: batch is stored once). Computed by the worker (``_blocks``): in the insert's statement, two
#: aggregates over its rows cost the server 3 µs a row.
BLOCKS: Final = f"""
    WITH blocks AS (
        INSERT INTO single_blocks AS b
        SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[],
                             %b::bigint[]) ORDER BY 1, 2
        ON CONFLICT (puid, batch_no) DO UPDATE SET
            first_ns = least(b.first_ns, excluded.first_ns),
            last_ns = greatest(b.last_ns, excluded.last_ns),
            longest_ns = greatest(b.longest_ns, excluded.longest_ns)
    )
    INSERT INTO single_block_roots AS r
    SELECT puid, batch_no, root_name, max(last_ns), max(longest_ns) FROM (
        SELECT s.puid, s.batch_no, {METHOD_NAME_OF.format(row="s")} AS root_name,
            s.last_ns, s.longest_ns
        FROM unnest(%b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[], %b::bigint[])
            AS s (puid, batch_no, method, last_ns, longest_ns)) AS named
    WHERE root_name IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (puid, batch_no, root_name) DO UPDATE SET
        last_ns = greatest(r.last_ns, excluded.last_ns),
        longest_ns = greatest(r.longest_ns, excluded.longest_ns)"""
_OF_SINGLES: Final = "FROM sequences WHERE seq = ANY(%(seqs)s) AND one_batch IS NOT NULL ORDER BY 1"
#: A single-row sequence's side-table rows, from its row (``spread``): its root (decided: its
#: start is the row's, not yet lowered by the group, and its end and exception are the row's;
#: the lowest-ranked candidate wins, as in ``UPSERT_ROOTS``, and over the group's own candidate
#: of equal rank, the same Start stored again), its thread, its batch; then its row's own
#: columns cleared.
_SPREAD: Final = (
    f"""INSERT INTO seq_roots AS r
        SELECT seq, 0, 0, start_ns, one_puid, one_iid, one_method, end_ns, error {_OF_SINGLES}
        ON CONFLICT (seq) DO UPDATE SET {EARLIER_ROOT_UPDATE}""",
    f"""INSERT INTO seq_threads SELECT seq, one_puid, one_tid {_OF_SINGLES}
        ON CONFLICT DO NOTHING""",
    f"""INSERT INTO batch_seqs SELECT seq, one_puid, one_batch, one_methods {_OF_SINGLES}
        ON CONFLICT DO NOTHING""",
    """UPDATE sequences SET one_puid = NULL, one_tid = NULL, one_iid = NULL,
        one_method = NULL, one_batch = NULL, one_methods = NULL
        WHERE seq = ANY(%(seqs)s) AND one_batch IS NOT NULL""",
)


def insert(conn: Conn, written: Sequence[Written]) -> list[SingleRow]:
    """Store the single-row sequences of the batches a group wrote (``written``, in the order it
    wrote them); the rows stored so. The caller writes their blocks (``write_blocks``) and the
    others' side-table rows.

    The rows are inserted plainly first, in a savepoint: ``ON CONFLICT``'s speculative insertion
    (a look in the id's index before each row, then the row marked and confirmed) costs the
    server about 2.3 µs a row, a fifth of the insert (issue 33, goal 6), and a candidate stored
    before is rare (a batch sent again, a sequence's second batch that looks like a request).
    When one is, the savepoint is rolled back and the group's rows inserted with the clause."""
    rows = singles(written)
    if not rows:
        return rows
    rows.sort(key=lambda row: row[0])
    params = arrays(rows)
    try:
        with conn.transaction():
            conn.execute(INSERT_NEW_SINGLES, params)
    except psycopg.errors.UniqueViolation:
        inserted = {bytes(seq) for (seq,) in conn.execute(INSERT_SINGLES, params).fetchall()}
        return [row for row in rows if row[0] in inserted]
    return rows


def write_blocks(conn: Conn, stored: list[SingleRow]) -> None:
    """The blocks of the single rows ``insert`` stored (``BLOCKS``): one statement, which the
    caller may send in its pipeline with the group's others."""
    if stored:
        conn.execute(BLOCKS, _blocks(stored))


def _blocks(stored: list[SingleRow]) -> list[object]:
    """``BLOCKS``' arrays for the single rows ``stored``: per batch, the earliest and latest
    start and the longest duration; per batch and root method, the latest start and the longest
    duration. One pass keeps each batch's and method's earliest and latest start and longest
    duration, updated in place (a group's single rows: a few thousand); the batches' follow."""
    zones: dict[tuple[int, int, int], list[int]] = {}
    for row in stored:
        start_ns = row[1]
        duration = row[5] - start_ns
        key = (row[7], row[11], row[4])  # one_puid, one_batch, the root's method
        zone = zones.get(key)
        if zone is None:
            zones[key] = [start_ns, start_ns, duration]
            continue
        if start_ns < zone[0]:
            zone[0] = start_ns
        elif start_ns > zone[1]:
            zone[1] = start_ns
        if duration > zone[2]:  # noqa: PLR1730 -- a call of max() costs more
            zone[2] = duration
    blocks: dict[tuple[int, int], list[int]] = {}
    for (puid, batch_no, _method), (first, last, longest) in zones.items():
        block = blocks.setdefault((puid, batch_no), [first, last, longest])
        block[0], block[1], block[2] = (
            min(block[0], first),
            max(block[1], last),
            max(block[2], longest),
        )
    return [
        *arrays((*key, *block) for key, block in sorted(blocks.items())),
        *arrays((*key, last, longest) for key, (_first, last, longest) in sorted(zones.items())),
    ]


def write_batch_seqs(conn: Conn, written: Sequence[Written], singles: Collection[bytes]) -> None:
    """The ``batch_seqs`` rows of the group's batches (which sequences each holds, and the
    methods each ran there), but the single rows': one statement for the group, in key order."""
    rows = sorted(
        (seq, puid, batch_no, packed.seq_methods.get(seq))
        for puid, batch_no, packed in written
        for seq in packed.seqs
        if seq not in singles
    )
    if rows:
        conn.execute(
            "INSERT INTO batch_seqs SELECT * FROM unnest("
            "%b::bytea[], %b::bigint[], %b::bigint[], %b::bytea[])",
            arrays(rows),
        )


def spread(conn: Conn, seqs: Sequence[bytes]) -> None:
    """Move the single-row sequences ``seqs`` (locked by the caller) to the side tables, their
    rows' own columns cleared: a later batch brings more of them."""
    params = {"seqs": list(seqs)}
    for statement in _SPREAD:
        conn.execute(statement, params)

"""Request-shaped sequences stored as one row each (SQLite schema 13, ``SINGLE_ROWS_SCHEMA``).

A web service's sequence is a request: its root and its few calls start and end in one batch, on
one thread, and nothing else ever arrives for it. Stored like any other, it costs eight B-tree
rows (``sequences`` and its three indexes, ``seq_roots``, ``seq_threads``, ``batch_seqs`` and its
index by batch): most of the repository's time per request (issue 33, goal 6). A *single row*
sequence keeps on its ``sequences`` row what the three side tables would hold (its root, its
thread, its batch and the methods it ran there), so it costs its row, the row's three listing
indexes and a partial index by batch (for ``prune``): five. Since schema 16 the listing indexes
hold no single row and the index by batch is gone: a group's single rows are a block
(``cmr.store.sqlite.blocks``, written here once they are inserted), and a single row costs its
row and the id's unique index.

Which sequences of a group are stored so is ``cmr.store.single_rows``' rule (shared with
PostgreSQL). A later batch that brings more of a single-row sequence (a Start, a Handoff) first
moves it to the side tables (``spread``), so the side tables' rules (the lowest root candidate
wins, counts add up) apply as before. The readers take a single row's columns wherever they
read the side tables (``cmr.store.sqlite.statements``); the listing lines, trees, prune and
searches give the same answers either way (tests/cmr/store/test_single_rows.py ingests the same
traffic with ``single_rows.ENABLED`` off and on and compares them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter

from cmr.store.accel import accelerator
from cmr.store.single_rows import SingleRow, Written, singles
from cmr.store.sqlite import blocks
from cmr.store.sqlite.read import in_chunks

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final, TypeAlias

    from invoseq.wire import Batch

#: A single-row sequence: its listing keys as ``UPSERT_SEQUENCE`` sets those of a new decided
#: one (the root's name looked up, its end and exception), its root, thread and batch. A
#: sequence stored before is left as it is (the caller finds it and writes it as before). Its
#: parameters are ``_bound``'s: an exception that is not there comes as 0, made NULL here.
INSERT_SINGLE: Final = """
    INSERT INTO sequences (
        seq, start_ns, invocations, root_name, end_ns, error,
        one_puid, one_tid, one_iid, one_method, one_batch, one_methods)
    VALUES (?, ?, ?, ?, ?, nullif(?, 0), ?, ?, ?, ?, ?, ?)
    ON CONFLICT (seq) DO NOTHING"""
#: The group's single rows staged in the connection's temporary database before the write turn
#: (``stage``; the temporary database takes no lock on the file), then inserted from there in
#: the turn (``INSERT_STAGED``): binding each row's twelve parameters from Python was a third of
#: ``INSERT_SINGLE``'s time, and with ``cmr serve --workers`` the turn is what every writer
#: waits for (issue 33). Rows go in as staged, in key order, each taking the next rowid.
_STAGE_TABLE: Final = """
    CREATE TEMP TABLE IF NOT EXISTS single_stage (
        seq BLOB, start_ns INTEGER, invocations INTEGER, root_name TEXT, end_ns INTEGER,
        error, one_puid INTEGER, one_tid INTEGER, one_iid INTEGER, one_method INTEGER,
        one_batch INTEGER, one_methods BLOB)"""
_STAGE: Final = "INSERT INTO temp.single_stage VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
INSERT_STAGED: Final = """
    INSERT INTO sequences (
        seq, start_ns, invocations, root_name, end_ns, error,
        one_puid, one_tid, one_iid, one_method, one_batch, one_methods)
    SELECT seq, start_ns, invocations, root_name, end_ns, nullif(error, 0),
        one_puid, one_tid, one_iid, one_method, one_batch, one_methods
    FROM temp.single_stage WHERE true ORDER BY rowid
    ON CONFLICT (seq) DO NOTHING"""
#: A root's name as a listing line shows it (NULL: its method is not known).
_ROOT_NAME: Final = """
    SELECT CASE WHEN module != '' THEN module || '.' || qualname ELSE qualname END
    FROM methods WHERE puid = ? AND method = ?"""
#: A single-row sequence's side-table rows, from its row (``spread``): its root (decided: its
#: end and exception are its row's), its thread, its batch; then its row's own columns cleared.
_SPREAD: Final = (
    """INSERT OR IGNORE INTO seq_roots
       SELECT seq, 0, 0, start_ns, one_puid, one_iid, one_method, end_ns, error
       FROM sequences WHERE seq = ? AND one_batch IS NOT NULL""",
    """INSERT OR IGNORE INTO seq_threads SELECT seq, one_puid, one_tid
       FROM sequences WHERE seq = ? AND one_batch IS NOT NULL""",
    """INSERT OR IGNORE INTO batch_seqs SELECT seq, one_puid, one_batch, one_methods
       FROM sequences WHERE seq = ? AND one_batch IS NOT NULL""",
    """UPDATE sequences SET one_puid = NULL, one_tid = NULL, one_iid = NULL,
       one_method = NULL, one_batch = NULL, one_methods = NULL
       WHERE seq = ? AND one_batch IS NOT NULL""",
)


class RootNames:
    """The root names a writer has looked up or read from its batches' methods, by (puid,
    method), kept from group to group: a group's single rows are made before its write turn
    (``writes.GroupPlan``), and a root whose name is known needs no lookup in it. A method's
    name does not change (a sender sends the same method each time; a forged one that differs
    names the roots of this writer's later groups, as it would have until the next batch that
    carries it). A name not found (its method not known yet) is looked up again each time.
    Bounded: forgotten all at once past ``LIMIT`` names."""

    __slots__ = ("_names",)

    LIMIT: Final = 65_536

    def __init__(self) -> None:
        self._names: dict[tuple[int, int], str] = {}

    def learn(self, batches: Iterable[Batch]) -> None:
        """The names of the methods ``batches`` carry, in order (a later one wins, as the
        batches' rows replace each other in ``methods``)."""
        names = self._names
        for batch in batches:
            puid = batch.puid
            for m in batch.methods:
                names[puid, m.method] = f"{m.module}.{m.qualname}" if m.module else m.qualname
        if len(names) > self.LIMIT:
            names.clear()

    def bound(self, rows: Sequence[SingleRow]) -> Bound | None:
        """``INSERT_SINGLE``'s parameters for ``rows`` and their block's zones and batches, or
        None when a root's name is not known (``looked_up`` then, in the write turn)."""
        try:
            return _bound(rows, self._names)
        except KeyError:
            return None

    def looked_up(
        self, conn: sqlite3.Connection, rows: Sequence[SingleRow]
    ) -> list[tuple[object, ...]]:
        """``params`` for ``rows``, the names not known looked up (a few a group)."""
        names = self._names
        found: dict[tuple[int, int], str | None] = {}
        for root in {(row[3], row[4]) for row in rows}:
            name = names.get(root)
            if name is None:
                looked = conn.execute(_ROOT_NAME, root).fetchone()
                name = None if looked is None else looked[0]
                if name is not None:
                    names[root] = name
            found[root] = name
        return _bound(rows, found)[0]


#: ``INSERT_SINGLE``'s parameters for a group's single rows, and their block's zones and batches.
Bound: TypeAlias = "tuple[list[tuple[object, ...]], blocks.Zones]"


def _bound(rows: Sequence[SingleRow], name_of: Mapping[tuple[int, int], str | None]) -> Bound:
    """``INSERT_SINGLE``'s parameters for ``rows``, each root named by ``name_of`` (KeyError for
    a root it does not name), and the zones and batches of the block they make (as
    ``blocks.record`` would read them back), in one pass: the C accelerator's
    (``bound_singles``, without a Python object a row but the parameters), else
    ``_bound_in_python``, the reference (for rows not in a list, names not in a dict, or a row
    whose numbers exceed 64 bits)."""
    if accelerator is not None:
        try:
            bound: Bound = accelerator.bound_singles(rows, name_of)
            return bound
        except (TypeError, OverflowError):
            pass
    return _bound_in_python(rows, name_of)


def _bound_in_python(
    rows: Sequence[SingleRow], name_of: Mapping[tuple[int, int], str | None]
) -> Bound:
    """``_bound`` in Python.

    The sqlite3 module binds an int, a float, a str or a bytearray as it is, but looks for an
    adapter for anything else, bytes and None included (a tuple made, a dict lookup and two
    attribute lookups: about a third of the insert of a row whose id, methods and missing
    exception took it; issue 33). So the id and the methods are bound as bytearrays (the same
    BLOBs) and a missing exception as 0, which the statement makes NULL (an exception is a str,
    never 0)."""
    params: list[tuple[object, ...]] = []
    add = params.append
    zones: dict[str | None, list[int]] = {}  # name: earliest start, latest start, longest
    batches: set[tuple[int, int]] = set()
    for (
        seq, start, count, root_puid, root_method, end, error,
        puid, tid, iid, method, batch_no, methods,
    ) in rows:  # fmt: skip
        name = name_of[root_puid, root_method]
        add((
            bytearray(seq), start, count, name, end, 0 if error is None else error,
            puid, tid, iid, method, batch_no, bytearray(methods),
        ))  # fmt: skip
        batches.add((puid, batch_no))
        zone = zones.get(name)
        if zone is None:
            zones[name] = [start, start, end - start]
            continue
        if start < zone[0]:
            zone[0] = start
        elif start > zone[1]:
            zone[1] = start
        zone[2] = max(zone[2], end - start)
    return params, ([(name, z[0], z[1], z[2]) for name, z in zones.items()], batches)


class Planned:
    """A group's single rows, made before its write turn for every batch of the group: the
    rows in key order, their ``INSERT_SINGLE`` parameters when every root's name was known
    (None: looked up in the turn), their sequences, and the group's other sequences (which may
    be single rows stored before: ``store`` moves them). Without ``names``, no single row (the
    side tables take every sequence: ``single_rows.ENABLED`` off)."""

    __slots__ = ("others", "params", "rows", "seqs", "staged", "zones")

    def __init__(self, written: Sequence[Written], names: RootNames | None) -> None:
        rows = singles(written) if names is not None else []
        # Key order: pages visited once (``writes._index_rows``). By the id alone (each row's is
        # its own): a tuple comparison tests the ids for equality before ordering them.
        rows.sort(key=itemgetter(0))
        self.rows = rows
        bound = names.bound(rows) if names is not None and rows else None
        self.params: list[tuple[object, ...]] | None = None
        #: The block's zones and batches (``_bound``), when every name is known.
        self.zones: blocks.Zones | None = None
        if bound is not None:
            self.params, self.zones = bound
        self.seqs = set(map(itemgetter(0), rows))
        #: Its ``params`` are in the stage (``stage``).
        self.staged = False
        self.others: set[bytes] = set().union(*(packed.seqs for _p, _b, packed in written))
        self.others -= self.seqs


def stage(conn: sqlite3.Connection, planned: Planned) -> None:
    """Put the single rows ``planned`` in the stage, in a transaction of the caller's that
    writes nothing but the temporary database (before the write turn): ``store`` inserts them
    from there. Rows whose names are not all known are bound in the turn as before."""
    if planned.params is None:
        return
    conn.execute(_STAGE_TABLE)
    conn.execute("DELETE FROM temp.single_stage")
    conn.executemany(_STAGE, planned.params)
    planned.staged = True


def store(conn: sqlite3.Connection, planned: Planned, names: RootNames) -> set[bytes]:
    """Store the single rows ``planned`` for the batches a group wrote, and move to the side
    tables the single-row sequences stored before that these batches bring more of. The
    sequences stored as single rows: the caller writes the others' side-table rows and summaries
    as before."""
    rows = planned.rows
    inserted = 0
    if rows:
        (last_row,) = conn.execute("SELECT coalesce(max(rowid), 0) FROM sequences").fetchone()
        before = conn.total_changes
        if planned.staged:
            conn.execute(INSERT_STAGED)
        else:
            params = planned.params
            conn.executemany(
                INSERT_SINGLE, names.looked_up(conn, rows) if params is None else params
            )
        inserted = conn.total_changes - before
        if inserted:  # their rowids follow the last one
            known = planned.zones if inserted == len(rows) else None  # else: some skipped
            blocks.record(conn, last_row + 1, last_row + inserted, known)
    stored, others = planned.seqs, planned.others
    if inserted != len(rows):  # some were stored before: not single rows
        before_now = _stored_before(conn, rows)
        stored, others = stored - before_now, others | before_now
    if others:
        spread(conn, _among_singles(conn, sorted(others)))
    return stored


def spread(conn: sqlite3.Connection, seqs: Sequence[bytes]) -> None:
    """Move the single-row sequences ``seqs`` to the side tables (their rows' own columns
    cleared): a later batch brings more of them."""
    if seqs:
        params = [(seq,) for seq in seqs]
        for statement in _SPREAD:
            conn.executemany(statement, params)


def _among_singles(conn: sqlite3.Connection, seqs: Sequence[bytes]) -> list[bytes]:
    """Those of ``seqs`` stored as single rows."""
    return [
        seq
        for part in in_chunks(seqs)
        for (seq,) in conn.execute(
            "SELECT seq FROM sequences WHERE one_batch IS NOT NULL "
            f"AND seq IN ({', '.join('?' * len(part))})",
            part,
        )
    ]


def _stored_before(conn: sqlite3.Connection, rows: Sequence[SingleRow]) -> set[bytes]:
    """The sequences of ``rows`` whose row is not the one just inserted (stored before)."""
    mine = {row[0]: (row[7], row[11]) for row in rows}
    found: set[bytes] = set()
    for part in in_chunks(list(mine)):
        for seq, puid, batch_no in conn.execute(
            "SELECT seq, one_puid, one_batch FROM sequences "
            f"WHERE seq IN ({', '.join('?' * len(part))})",
            part,
        ):
            if (puid, batch_no) != mine[seq]:
                found.add(seq)
    return found

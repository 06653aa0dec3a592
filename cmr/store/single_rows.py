"""Which sequences of a group may be stored as *single rows* (SQLite's ``cmr.store.sqlite.single``,
PostgreSQL's ``cmr.store.postgres.single``): the rule both stores share.

A web service's sequence is a request: its root and its few calls start and end in one batch, on
one thread, and nothing else ever arrives for it. Stored like any other, it costs a row in
``sequences`` and its listing indexes, and rows in three side tables (``seq_roots``,
``seq_threads``, ``batch_seqs`` and its index by batch): most of the repository's time per
request (issue 33, goal 6). A single-row sequence keeps on its ``sequences`` row what the side
tables would hold (its root, its thread, its batch and the methods it ran there).

A group's sequence may be stored so when every Start of it in the group is in one batch and on
one thread, its root candidate is a true root (no parent, no hand-off) that is its earliest
Start and ended in that batch, it has no Handoff in the group, no entry continuing a hand-off
and nothing left open; and it was not stored before (each store's insert does nothing on a
stored sequence, which then takes the side tables). A later batch that brings more of a
single-row sequence moves it to the side tables, so their rules (the lowest root candidate
wins, counts add up) apply as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

from cmr.store.batch_index import PackedBatch

#: The internal switch: off, every sequence takes the side tables (the equivalence tests).
ENABLED = True

#: A batch the group wrote: (puid, batch_no, its pack).
Written = tuple[int, int, PackedBatch]
#: A single row: seq, start_ns, invocations, the root's (puid, method) its name is looked up by,
#: end_ns, error, then the row's own columns: puid, tid, iid, method, batch_no, methods.
SingleRow = tuple[bytes, int, int, int, int, int, str | None, int, int, int, int, int, bytes]


def singles(written: Sequence[Written]) -> list[SingleRow]:
    """The rows of the sequences of ``written`` that may be single rows (the module's rules)."""
    shared: set[bytes] = set()  # the sequences of two batches of the group or more
    if len(written) > 1:
        every: set[bytes] = set()
        for _puid, _batch_no, packed in written:
            shared |= every & packed.seqs
            every |= packed.seqs
    rows: list[SingleRow] = []
    for puid, batch_no, packed in written:
        rows += _of_batch(puid, batch_no, packed, shared)
    return rows


def _of_batch(
    puid: int, batch_no: int, packed: PackedBatch, shared: set[bytes]
) -> Iterator[SingleRow]:
    parts = packed.summary
    tid_of = {seq: tid for seq, _puid, tid in parts.threads}
    excluded: set[bytes] = set()
    if len(tid_of) != len(parts.threads):  # a sequence on two threads
        excluded.update(seq for seq, n in Counter(t[0] for t in parts.threads).items() if n > 1)
    excluded.update(row[0] for row in parts.entries)
    excluded.update(row[2] for row in parts.opened)
    excluded.update(row[1] for row in packed.handoffs)
    if shared:
        excluded |= shared & packed.seqs
    first_start, counts, methods = packed.first_start, parts.counts, packed.seq_methods
    for seq, untrue, handed, start_ns, _puid, iid, method, end_ns, error in parts.roots:
        if (
            untrue
            or handed
            or end_ns is None
            or start_ns != first_start[seq]
            or (excluded and seq in excluded)
        ):
            continue
        yield (
            seq,
            start_ns,
            counts[seq],
            puid,
            method,
            end_ns,
            error,
            puid,
            tid_of[seq],
            iid,
            method,
            batch_no,
            methods[seq],
        )

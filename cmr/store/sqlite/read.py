"""The SQLite backend's reads of a sequence and its retention, on a connection inside a transaction
the caller holds (``SQLiteStore``): the sequence's batches unpacked (``cmr.store.stored_batches``),
then the hand-offs, methods, threads and processes its invocations name, each by index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from cmr.store.base import MethodRecord, ProcessRecord
from cmr.store.rules import is_lost, step_counter
from cmr.store.sqlite.statements import (
    PROCESS_COLUMNS,
    PRUNE_BATCHES,
    PRUNED_PROCESSES,
    SEQUENCE_BATCHES,
)

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # what a listing never reads (``processes`` is all it asks here) loads on use
    from typing import Any, Final

    from cmr.store.base import OnStep
    from cmr.store.records import HandoffRecord, InvocationRecord, PruneResult, ThreadRecord
    from cmr.store.stored_batches import LateAttrs, LateEnd
    from cmr.store.summaries import BatchCache

#: Bound parameters per ``IN (...)`` list, well under SQLite's limit.
IN_LIST_MAX: Final = 400


def invocations(
    conn: sqlite3.Connection, seq: bytes, cache: BatchCache | None = None
) -> Sequence[InvocationRecord]:
    """The sequence's invocations, from its batches and the late Ends and Attrs they lack."""
    from cmr.store.columns import read_records

    def late_ends(keys: list[tuple[int, int]]) -> Iterator[LateEnd]:
        for part in in_chunks(keys):
            values = ", ".join("(?, ?)" for _ in part)
            yield from conn.execute(
                "SELECT puid, iid, end_ns, error FROM late_ends "
                f"WHERE (puid, iid) IN (VALUES {values})",
                [number for key in part for number in key],
            )

    def late_attrs(puids: set[int]) -> Iterator[LateAttrs]:
        for part in in_chunks(sorted(puids)):
            yield from conn.execute(
                "SELECT puid, iid, batch_no, attributes FROM late_attrs "
                f"WHERE puid IN ({', '.join('?' * len(part))})",
                part,
            )

    return read_records(
        seq, conn.execute(SEQUENCE_BATCHES, {"seq": seq}), late_ends, late_attrs, cache
    )


def handoffs(
    conn: sqlite3.Connection, seq: bytes, records: Sequence[InvocationRecord]
) -> dict[int, HandoffRecord]:
    """The hand-offs recorded in the sequence, and those its invocations continue (found by hid
    alone, wherever they were recorded)."""
    from cmr.store.columns import distinct_values
    from cmr.store.records import HandoffRecord

    columns = "hid, puid, parent, kind, method, submitted_ns"
    found = {
        row[0]: HandoffRecord(*row)
        for row in conn.execute(f"SELECT {columns} FROM handoffs WHERE seq = ?", (seq,))
    }
    continued = sorted(distinct_values(records, "hid") - found.keys() - {0})
    for part in in_chunks(continued):
        marks = ", ".join("?" * len(part))
        for row in conn.execute(f"SELECT {columns} FROM handoffs WHERE hid IN ({marks})", part):
            found[row[0]] = HandoffRecord(*row)
    return found


def names(
    conn: sqlite3.Connection,
    records: Sequence[InvocationRecord],
    found_handoffs: dict[int, HandoffRecord],
) -> tuple[dict[tuple[int, int], MethodRecord], dict[tuple[int, int], ThreadRecord]]:
    """The methods and threads the invocations and hand-offs name."""
    from cmr.store.columns import process_pairs
    from cmr.store.records import ThreadRecord

    wanted_methods, wanted_threads = process_pairs(records, "method", "tid")
    wanted_methods.update((h.puid, h.method) for h in found_handoffs.values())
    puids = sorted({puid for puid, _ in wanted_methods})
    methods: dict[tuple[int, int], MethodRecord] = {}
    threads: dict[tuple[int, int], ThreadRecord] = {}
    for part in in_chunks(puids):
        marks = ", ".join("?" * len(part))
        for puid, method, module, qualname, file, line in conn.execute(
            "SELECT puid, method, module, qualname, file, line FROM methods "
            f"WHERE puid IN ({marks})",
            part,
        ):
            if (puid, method) in wanted_methods:
                methods[puid, method] = MethodRecord(module, qualname, file, line)
        for puid, tid, native_id, name in conn.execute(
            f"SELECT puid, tid, native_id, name FROM threads WHERE puid IN ({marks})", part
        ):
            if (puid, tid) in wanted_threads:
                threads[puid, tid] = ThreadRecord(native_id, name)
    return methods, threads


def processes(conn: sqlite3.Connection, puids: Iterable[int], now: int) -> dict[int, ProcessRecord]:
    found: dict[int, ProcessRecord] = {}
    for part in in_chunks(sorted(set(puids))):
        marks = ", ".join("?" * len(part))
        for row in conn.execute(
            f"SELECT {PROCESS_COLUMNS} FROM processes WHERE puid IN ({marks})", part
        ):
            found[row[0]] = process_record(row, now)
    return found


def process_record(row: tuple[Any, ...], now: int) -> ProcessRecord:
    import json

    puid, pid, host, platform_id, argv, ended, dropped, last_seen_ns, heartbeat_ms = row
    return ProcessRecord(
        puid=puid,
        pid=pid,
        host=host,
        platform_id=platform_id,
        argv=tuple(json.loads(argv)),
        ended=bool(ended),
        dropped=dropped,
        last_seen_ns=last_seen_ns,
        heartbeat_ms=heartbeat_ms,
        lost=is_lost(
            ended=bool(ended), heartbeat_ms=heartbeat_ms, last_seen_ns=last_seen_ns, now_ns=now
        ),
    )


#: Tables of a process's own names, removed with it.
_PER_PROCESS: Final = (
    "methods",
    "threads",
    "frames",
    "samplers",
    "sample_threads",
    "lost_windows",
)


_PRUNED_PER_SEQUENCE: Final = (
    "batch_seqs",
    "handoffs",
    "lost_seqs",
    "sequences",
    "seq_roots",
    "seq_threads",
    "seq_entries",
    "open_calls",
)
#: ``prune``'s steps, for progress: the sequences found, a table each, batches, late ends, late
#: attributes, samples, processes.
_PRUNE_STEPS: Final = 1 + len(_PRUNED_PER_SEQUENCE) + 5


def prune(conn: sqlite3.Connection, before_ns: int, on_step: OnStep | None = None) -> PruneResult:
    """``Store.prune`` on the caller's transaction."""
    from cmr.store.records import PruneResult

    step = step_counter(on_step, _PRUNE_STEPS)

    conn.execute("CREATE TEMP TABLE IF NOT EXISTS pruned (seq BLOB PRIMARY KEY) WITHOUT ROWID")
    conn.execute("DELETE FROM temp.pruned")
    conn.execute(
        "INSERT INTO temp.pruned SELECT seq FROM sequences "
        "WHERE start_ns < ? AND one_batch IS NULL",
        (before_ns,),
    )
    conn.execute(  # the single rows, which the start index does not hold: by their blocks
        "INSERT OR IGNORE INTO temp.pruned SELECT q.seq FROM single_blocks b "
        "JOIN sequences q ON q.rowid BETWEEN b.first_row AND b.last_row "
        "WHERE b.first_ns < ? AND q.one_batch IS NOT NULL AND q.start_ns < ?",
        (before_ns, before_ns),
    )
    (sequences,) = conn.execute("SELECT count(*) FROM temp.pruned").fetchone()
    step()
    for table in _PRUNED_PER_SEQUENCE:
        conn.execute(f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM temp.pruned)")
        step()
    # A batch goes once no sequence it holds is left (a batch may hold old and new sequences),
    # in the side tables or as a single row (the blocks' ``single_block_batches``).
    conn.execute(PRUNE_BATCHES, (before_ns,))
    from cmr.store.sqlite import blocks  # the write side's

    blocks.prune(conn, before_ns)
    step()
    # An End before the cutoff belongs to an invocation that started before it, so its sequence
    # was pruned.
    conn.execute("DELETE FROM late_ends WHERE end_ns < ?", (before_ns,))
    step()
    conn.execute(
        "DELETE FROM late_attrs WHERE NOT EXISTS (SELECT 1 FROM batches b "
        "WHERE b.puid = late_attrs.puid AND b.batch_no = late_attrs.batch_no)"
    )
    step()
    samples = conn.execute("DELETE FROM samples WHERE t_ns < ?", (before_ns,)).rowcount
    step()
    gone = [puid for (puid,) in conn.execute(PRUNED_PROCESSES, (before_ns,))]
    for part in in_chunks(gone):
        marks = ", ".join("?" * len(part))
        for table in (*_PER_PROCESS, "late_ends", "late_attrs", "processes"):
            conn.execute(f"DELETE FROM {table} WHERE puid IN ({marks})", part)
    conn.execute("DELETE FROM temp.pruned")
    step()
    return PruneResult(sequences=sequences, samples=samples, processes=len(gone))


def in_chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    """``items`` in parts of at most ``IN_LIST_MAX``: one ``IN (...)`` list each."""
    for at in range(0, len(items), IN_LIST_MAX):
        yield items[at : at + IN_LIST_MAX]

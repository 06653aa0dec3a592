"""Records and helpers the store tests share."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import msgspec

from cmr.store.sqlite.schema import (
    HANDOFFS_SCHEMA,
    HEARTBEAT_SCHEMA,
    LEGACY_EVENTS_SCHEMA,
    LOST_SEQS_SCHEMA,
    PACKED_SCHEMA,
    ROOT_ERROR_SCHEMA,
    SAMPLES_SCHEMA,
    SCHEMA,
    SUMMARY_SCHEMA,
)
from tracer import wire

BatchFactory = Callable[..., wire.Batch]
encode = msgspec.msgpack.Encoder().encode


def seq_id(hex_prefix: str) -> bytes:
    """A sequence id starting with ``hex_prefix`` (zero-padded)."""
    return bytes.fromhex(hex_prefix.ljust(32, "0"))


def start(
    iid: int, t_ns: int, seq: bytes, *, parent: int = 0, hid: int = 0, method: int = 1
) -> wire.Start:
    return wire.Start(iid=iid, parent=parent, hid=hid, method=method, t_ns=t_ns, seq=seq)


def handoff(
    hid: int, parent: int, t_ns: int, seq: bytes, *, kind: str = "thread", method: int = 9
) -> wire.Handoff:
    return wire.Handoff(hid=hid, parent=parent, kind=kind, method=method, t_ns=t_ns, seq=seq)


S = seq_id("5e9")
H = 0x5EED_0000_0000_0001


def older_schema(path: str, version: int) -> None:
    """Write a repository as release ``version`` did: version 6 kept no listing lines, versions 1
    to 5 kept a row per Start and End instead of packed batches, version 4 had no lost sequences
    table, version 3 no sample tables either, version 2 no heartbeat column either, version 1 no
    hand-offs table either. It holds one process (seen at 123) and one running call."""
    left_out = (
        SUMMARY_SCHEMA
        + ROOT_ERROR_SCHEMA
        + (PACKED_SCHEMA if version < 6 else LEGACY_EVENTS_SCHEMA)
        + {
            6: (),
            5: (),
            4: LOST_SEQS_SCHEMA,
            3: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA,
            2: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA + HEARTBEAT_SCHEMA,
            1: LOST_SEQS_SCHEMA + SAMPLES_SCHEMA + HEARTBEAT_SCHEMA + HANDOFFS_SCHEMA,
        }[version]
    )
    with sqlite3.connect(path) as conn:
        for statement in SCHEMA + LEGACY_EVENTS_SCHEMA:
            if statement not in left_out and not statement.startswith("PRAGMA user_version"):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute(
            "INSERT INTO processes (puid, pid, host, platform_id, argv, clock_offset_ns, "
            "started_ns, ended, dropped, last_seen_ns) "
            "VALUES (7, 4242, 'old', 'pf', '[\"old.py\"]', 0, 0, 0, 0, 123)"
        )
        if version < 6:
            conn.execute("INSERT INTO starts VALUES (7, 1, ?, 0, 0, 1, 1, 100)", (S,))
        else:
            chunks = [wire.ThreadChunk(1, [start(1, 100, S)])]
            conn.execute("INSERT INTO batches VALUES (7, 1, 123, 1, 0, ?)", (encode(chunks),))
            conn.execute("INSERT INTO batch_seqs VALUES (?, 7, 1)", (S,))
            conn.execute("INSERT INTO seq_methods VALUES (?, 7, 1, ?)", (S, encode([1])))
        conn.execute("INSERT INTO sequences VALUES (?, 100)", (S,))
    conn.close()


def user_version(path: str) -> int:
    with sqlite3.connect(path) as conn:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    return version

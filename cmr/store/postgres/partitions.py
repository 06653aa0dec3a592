"""Day partitions of the PostgreSQL repository's event tables: which day a row goes to, creating
the partitions a batch needs, and finding those ``prune`` may drop whole.

A row's day is ``floor(t / DAY_NS)`` of its own time, clamped into a window around the
repository's clock: a day more than PAST_DAYS back goes to the oldest day of the window, and one
more than FUTURE_DAYS ahead to the FUTURE partition. The window bounds how many partitions a
process with a wrong clock (or a forged batch) can make. Clamping a day *up* keeps what ``prune``
relies on, that every row in the partition of day ``d`` (other than FUTURE) has a time before
``(d + 1) * DAY_NS``; the FUTURE partition is never dropped, only pruned row by row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from psycopg import sql

from cmr.store.postgres.connect import Conn
from cmr.store.postgres.schema import PARTITIONED

DAY_NS: Final = 86_400 * 1_000_000_000
#: How far back a day is kept as itself; older rows go to the oldest day of the window.
PAST_DAYS: Final = 31
#: How far ahead a day is kept as itself; later rows go to the FUTURE partition.
FUTURE_DAYS: Final = 2
#: The day of the partition that takes every later row (year 4707: no real day reaches it).
FUTURE: Final = 1_000_000
#: Serialises partition creation between nodes (``pg_advisory_xact_lock``); "ivsq" "part".
PARTITION_LOCK: Final = 0x69767371_70617274

_PARTITIONS_OF: Final = """
    SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass(%s)"""


def day_window(now_ns: int) -> tuple[int, int]:
    """The lowest and highest day kept as itself when the repository's clock reads ``now_ns``."""
    today = now_ns // DAY_NS
    return today - PAST_DAYS, today + FUTURE_DAYS


def day_of(t_ns: int, window: tuple[int, int]) -> int:
    """The partition day of a row with time ``t_ns`` (``day_sql`` says the same in SQL)."""
    lowest, highest = window
    day = t_ns // DAY_NS
    return FUTURE if day > highest else max(day, lowest)


def day_sql(column: str) -> str:
    """``day_of`` in SQL, for ``column`` of the row being inserted, the window bound to
    ``%(lowest)s`` and ``%(highest)s``. Floor division in bigint arithmetic, so Python and SQL
    agree on every value."""
    floor = f"({column} / {DAY_NS} - (mod({column}, {DAY_NS}) < 0)::int)"
    return (
        f"(CASE WHEN {floor} > %(highest)s THEN {FUTURE} "
        f"ELSE greatest({floor}, %(lowest)s) END)::integer"
    )


def partition_name(table: str, day: int) -> str:
    if day == FUTURE:
        return f"{table}_future"
    return f"{table}_d{day}" if day >= 0 else f"{table}_dm{-day}"


def existing_days(conn: Conn) -> set[tuple[str, int]]:
    """(table, day) of every partition there is now."""
    found: set[tuple[str, int]] = set()
    for table in PARTITIONED:
        for (name,) in _partition_names(conn, table):
            day = _day_of_name(table, name)
            if day is not None:
                found.add((table, day))
    return found


def create_partitions(conn: Conn, wanted: Iterable[tuple[str, int]]) -> None:
    """Create the (table, day) partitions that are missing, in their own transaction.

    Creating a partition locks its parent table exclusively, so it is kept out of the ingest
    transaction (where it could deadlock with another node's) and serialised between nodes."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PARTITION_LOCK,))
        there = existing_days(conn)
        for table, day in sorted(set(wanted) - there):
            upper = sql.SQL("MAXVALUE") if day == FUTURE else sql.Literal(day + 1)
            conn.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
                    sql.Identifier(partition_name(table, day)),
                    sql.Identifier(table),
                    sql.Literal(day),
                    upper,
                )
            )


def droppable(conn: Conn, before_ns: int) -> list[str]:
    """The partitions every row of which is older than ``before_ns``: those of a day that ends at
    or before it (never FUTURE's)."""
    names: list[str] = []
    for table in PARTITIONED:
        for (name,) in _partition_names(conn, table):
            day = _day_of_name(table, name)
            if day is not None and day != FUTURE and (day + 1) * DAY_NS <= before_ns:
                names.append(name)
    return sorted(names)


def _partition_names(conn: Conn, table: str) -> list[tuple[str]]:
    return [(str(name),) for name, _bound in conn.execute(_PARTITIONS_OF, (table,))]


def _day_of_name(table: str, name: str) -> int | None:
    """The day a partition of ``table`` holds, from its name; None for a table not ours."""
    if name == f"{table}_future":
        return FUTURE
    prefix = f"{table}_d"
    if not name.startswith(prefix):
        return None
    digits = name[len(prefix) :]
    negative = digits.startswith("m")
    digits = digits[1:] if negative else digits
    if not digits.isdigit():
        return None
    return -int(digits) if negative else int(digits)

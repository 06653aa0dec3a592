"""Column arrays packed in binary form (``cmr.store.postgres.binary``) read back as psycopg's own
dumps of the same lists, through every cast ingest binds them with."""

from __future__ import annotations

import pytest

from cmr.store.postgres.binary import Byteas, Int8s, Texts, column
from cmr.store.postgres.connect import connect

COLUMNS = [
    ([1, -3, 2**63 - 1, -(2**63)], ("bigint[]", "text[]")),
    ([0, 1, 1], ("integer[]", "bigint[]")),
    ([n * 7_919 - 2**40 for n in range(1_000)], ("bigint[]",)),  # a group's column
    ([5, None, 7], ("bigint[]", "integer[]")),
    ([], ("bigint[]", "bytea[]", "text[]")),
    ([b"\x00" * 16, b"\xff" * 16], ("bytea[]",)),
    ([b"ab", b"", None], ("bytea[]",)),
    (["ValueError", "é", None], ("text[]",)),
]


def test_columns_pack_by_type_and_what_cannot_be_packed_stays_a_list() -> None:
    assert type(column([1, None])) is Int8s
    assert type(column([b"x", None])) is Byteas
    assert type(column(["x"])) is Texts
    for values in ([2**64, 1], [True, False], [None, None], [1, "x"], [1.5]):
        assert column(values) == values


@pytest.mark.postgres
@pytest.mark.parametrize(("values", "casts"), COLUMNS)
def test_a_packed_column_reads_back_as_psycopg_dumps_it(
    pg_url: str, values: list[object], casts: tuple[str, ...]
) -> None:
    conn = connect(pg_url)
    try:
        for cast in casts:
            packed = conn.execute(f"SELECT %b::{cast}", (column(values),)).fetchone()
            dumped = conn.execute(f"SELECT %b::{cast}", (values,)).fetchone()
            assert packed == dumped
    finally:
        conn.close()


@pytest.mark.postgres
def test_packed_columns_unnest_into_rows(pg_url: str) -> None:
    conn = connect(pg_url)
    try:
        rows = conn.execute(
            "SELECT * FROM unnest(%b::bytea[], %b::integer[], %b::bigint[], %b::text[])",
            (column([b"a" * 16, b"b" * 16]), column([0, 1]), column([None, 5]), [None, "E"]),
        ).fetchall()
    finally:
        conn.close()
    assert rows == [(b"a" * 16, 0, None, None), (b"b" * 16, 1, 5, "E")]

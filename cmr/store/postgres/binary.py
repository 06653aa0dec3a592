"""Column arrays in PostgreSQL's binary array format, built in bulk.

Ingest binds each statement's rows as column arrays (``unnest(%b::bigint[], ...)``). psycopg
dumps a Python list element by element in Python (a length, a ``struct`` call and an append
each): with a short sequence per request, a group of batches binds tens of thousands of
elements, and that loop cost more of a core than PostgreSQL's own work on the rows (issue 33).
``column`` builds the same bytes in C calls: a column of integers converted by one ``array``
and spread into place by slices (a column with None: one ``struct`` call), bytes of one length
by one ``struct`` call, other bytes and strings by one join; psycopg sends them as they are,
typed by the wrapper (``Int8s``, ``Byteas``, ``Texts``), and the statement's cast
(``::integer[]``) converts where the column is narrower. A column it cannot pack (an integer
beyond 64 bits, another type) stays a list for psycopg, as before.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import chain, repeat
from typing import Final, cast

from psycopg import adapters
from psycopg.adapt import Dumper
from psycopg.pq import Format

_INT8: Final = 20
_BYTEA: Final = 17
_TEXT: Final = 25
_HEADER: Final = struct.Struct(">iiiii")  # dimensions, has nulls, element type, length, lower bound
_EMPTY: Final = struct.Struct(">iii")  # no dimension, no nulls, element type
_LENGTH: Final = struct.Struct(">i")
_NULL: Final = _LENGTH.pack(-1)
_INT8_ITEM: Final = struct.Struct(">iq")


class Int8s(bytes):
    """A ``bigint[]`` in binary form."""


class Byteas(bytes):
    """A ``bytea[]`` in binary form."""


class Texts(bytes):
    """A ``text[]`` in binary form."""


class _Packed(Dumper):
    format = Format.BINARY

    def dump(self, obj: bytes) -> bytes:
        return obj


class _Int8sDumper(_Packed):
    oid = 1016


class _ByteasDumper(_Packed):
    oid = 1001


class _TextsDumper(_Packed):
    oid = 1009


adapters.register_dumper(Int8s, _Int8sDumper)
adapters.register_dumper(Byteas, _ByteasDumper)
adapters.register_dumper(Texts, _TextsDumper)


def column(values: Sequence[object]) -> object:
    """``values`` as one array parameter: packed when they are all integers, bytes or strings
    (and None), else the list itself (psycopg dumps it)."""
    try:
        packed = _packed(values, set(map(type, values)))
    except (OverflowError, struct.error):  # an integer beyond 64 bits
        packed = None
    return list(values) if packed is None else packed


def _packed(values: Sequence[object], kinds: set[type]) -> bytes | None:
    if kinds == {int}:  # the common columns first, without a pass for None
        return Int8s(_array(_INT8, len(values), 0, _plain_ints(cast("Sequence[int]", values))))
    if kinds == {bytes}:
        return Byteas(_array(_BYTEA, len(values), 0, _bytes(values, 0)))  # type: ignore[arg-type]
    kinds.discard(type(None))
    nulls = len(values) - sum(value is not None for value in values) if None in values else 0
    if kinds == {int}:
        return Int8s(_array(_INT8, len(values), nulls, _ints(values, nulls)))
    if kinds == {bytes}:
        return Byteas(_array(_BYTEA, len(values), nulls, _bytes(values, nulls)))  # type: ignore[arg-type]
    if kinds == {str}:
        encoded = [None if v is None else v.encode() for v in values]  # type: ignore[attr-defined]
        return Texts(_array(_TEXT, len(values), nulls, _bytes(encoded, nulls)))
    return None


def _array(oid: int, length: int, nulls: int, body: bytes) -> bytes:
    if not length:
        return _EMPTY.pack(0, 0, oid)
    return _HEADER.pack(1, int(nulls > 0), oid, length, 1) + body


def _plain_ints(values: Sequence[int]) -> bytes:
    """Integers without None, each a length (8) and its 8 bytes big-endian: converted in one C
    call (``array``), then spread 12 bytes apart by slices (a third of ``struct.pack``'s time
    with an argument per field)."""
    items = array("q", values)
    if sys.byteorder == "little":
        items.byteswap()
    raw = items.tobytes()
    body = bytearray(12 * len(values))
    body[3::12] = b"\x08" * len(values)
    for at in range(8):
        body[4 + at :: 12] = raw[at::8]
    return bytes(body)


def _ints(values: Sequence[object], nulls: int) -> bytes:
    if not nulls:
        return struct.pack(">" + "iq" * len(values), *chain.from_iterable(zip(repeat(8), values)))
    pack = _INT8_ITEM.pack
    return b"".join([_NULL if v is None else pack(8, v) for v in values])


def _bytes(values: Sequence[bytes | None], nulls: int) -> bytes:
    if not nulls:
        sizes = {len(v) for v in values if v is not None}
        if len(sizes) == 1:
            [size] = sizes
            items = chain.from_iterable(zip(repeat(size), values))
            return struct.pack(">" + f"i{size}s" * len(values), *items)
    length = _LENGTH.pack
    return b"".join([_NULL if v is None else length(len(v)) + v for v in values])

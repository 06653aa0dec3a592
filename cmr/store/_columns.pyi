"""Types of the C accelerator of the repository's read path (``_columns.c``)."""

from array import array
from collections.abc import Iterable
from typing import Any

#: puid, iid, parent, hid, tid, method, start, end (int64 each), ended (a byte each).
GatheredColumns = tuple[
    array[int],
    array[int],
    array[int],
    array[int],
    array[int],
    array[int],
    array[int],
    array[int],
    bytearray,
]

class Index:
    def position(self, puid: int, iid: int, /) -> int: ...
    def parents(self, puids: Any, parent_iids: Any, /) -> array[int]: ...

def gather(
    seq: bytes, batches: Iterable[tuple[int, int, int, bytes]], /
) -> tuple[GatheredColumns, dict[int, str], list[tuple[int, bytes]], Index]: ...
def children(held: Any, /) -> tuple[array[int], array[int]]: ...
def subtree_sizes(held: Any, /) -> array[int]: ...
def profile_lines(
    held: Any, starts: Any, ends: Any, ended: Any, names: Any, ranks: Any, /
) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes, bytes]: ...
def shape_rows(
    parents: Any, parent: Any, hid: Any, starts: Any, /
) -> tuple[bytes, bytes, bool]: ...
def hang(parents: Any, root: int, /) -> array[int] | None: ...
def windows(rows: Any, starts: Any, ends: Any, ended: Any, /) -> list[tuple[int, int]]: ...
def nested(held: Any, starts: Any, ends: Any, ended: Any, /) -> bool: ...
def line_totals(
    held: Any, line_of: Any, rows: Any, weights: Any, cpus: Any, lines: int, /
) -> tuple[bytes, bytes, bytes]: ...
def ranked(rows: Any, priorities: Any, limit: int, /) -> bytes: ...
def spans(starts: Any, ends: Any, ended: Any, /) -> array[int]: ...
def covered(rows: Any, starts: Any, ends: Any, ended: Any, start: int, end: int, /) -> int: ...
def fold_sums(
    rows: Any, names: Any, starts: Any, ends: Any, ended: Any, /
) -> tuple[dict[int, tuple[int, int]], int, int]: ...

#: ``scan``'s result: events, t_min, t_max, then per sequence (wall-clock times) its set, root
#: rows, Start counts, (seq, puid, tid) pairs, earliest Starts, methods and their msgpack; then
#: the opened (iid, seq), the entries (seq, iid, hid, end), the late Ends (iid, t_ns), the rare
#: events (chunk, event, whether its iid has a Start here).
Scanned = tuple[
    int,
    int | None,
    int | None,
    set[bytes],
    list[tuple[bytes, int, int, int, int, int, int, int | None, None]],
    dict[bytes, int],
    set[tuple[bytes, int, int]],
    dict[bytes, int],
    dict[bytes, list[int]],
    dict[bytes, bytes],
    list[tuple[int, bytes]],
    list[tuple[bytes, int, int, int | None]],
    list[tuple[int, int]],
    list[tuple[int, int, bool]],
]

def scan(blob: bytes, puid: int, offset: int, encode: bool, /) -> Scanned: ...
def scan_batch(
    body: bytes, field: int, puid: int, offset: int, encode: bool, /
) -> tuple[bytes, Scanned]: ...
def distinct(values: Any, /) -> set[int]: ...
def total_at(values: Any, rows: Any, /) -> int: ...
def take(values: Any, rows: Any, /) -> array[int]: ...
def adopting(on: bool = ..., /) -> bool: ...

"""A sequence's invocations as column arrays: what ``cmr show`` of a million calls reads.

``stored_batches.unpack`` makes an ``InvocationRecord`` per call (and decodes an event Struct per
event to make it): about a microsecond and two hundred bytes per call. With the C accelerator
(``cmr/store/_columns.c``), ``unpack_columns`` reads the stored blobs directly into int64 columns
by the same rules, and returns them as ``RecordColumns``: a sequence of records like the list
``unpack`` returns (a record is made when one is asked for), whose columns and index the views
read directly when they walk a big tree (``cmr/views/tree/records.py``). The rare parts stay in
Python: exceptions' names, attributes, and the late Ends and Attrs the store keeps apart.

Without the accelerator (``cmr/store/accel.py``) ``columns_available()`` is False and the stores
call ``unpack``.
"""

from __future__ import annotations

import itertools
import operator
from array import array
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Final, overload

import msgspec

from cmr.store.accel import accelerator
from cmr.store.base import InvocationRecord
from cmr.store.stored_batches import (
    Attributes,
    LateAttributes,
    LateEnds,
    StoredBatch,
    decode_attributes,
    unpack,
)
from cmr.store.summaries import BatchCache
from invoseq.wire import Attrs

if TYPE_CHECKING:
    from cmr.store._columns import GatheredColumns

_decode_attrs = msgspec.msgpack.Decoder(Attrs).decode
_accel: Final = accelerator


def columns_available() -> bool:
    """Whether the stores read sequences as columns (the C accelerator is built and wanted)."""
    return _accel is not None


class RecordColumns(Sequence[InvocationRecord]):
    """A sequence's invocations in (start, puid, iid) order, one int64 array per field.

    The arrays are named as the record's fields. ``ended[i]`` says whether row i has an end
    (``end_ns[i]`` is then its time); ``errors`` and
    ``attributes`` hold the few rows that have them. ``position(puid, iid)`` is the row of an
    invocation (-1: not here); ``parent_rows()`` each row's parent's row in its process."""

    __slots__ = (
        "_index",
        "attributes",
        "distinct",
        "end_ns",
        "ended",
        "errors",
        "hid",
        "iid",
        "method",
        "parent",
        "puid",
        "start_ns",
        "tid",
    )

    def __init__(
        self,
        columns: GatheredColumns,
        errors: dict[int, str],
        attributes: dict[int, Attributes],
        index: object,
    ) -> None:
        """``columns``: ``gather``'s arrays, taken as they are (a copy of a million calls' nine
        columns cost as much as a tenth of reading them)."""
        (
            self.puid,
            self.iid,
            self.parent,
            self.hid,
            self.tid,
            self.method,
            self.start_ns,
            self.end_ns,
            self.ended,
        ) = columns
        self.errors = errors
        self.attributes = attributes
        self._index = index
        self.distinct: dict[str, set[int]] = {}  # a field's distinct values (process_pairs)

    def __len__(self) -> int:
        return len(self.iid)

    def record(self, i: int) -> InvocationRecord:
        return InvocationRecord(
            self.puid[i],
            self.iid[i],
            self.parent[i],
            self.hid[i],
            self.tid[i],
            self.method[i],
            self.start_ns[i],
            self.end_ns[i] if self.ended[i] else None,
            self.errors.get(i),
            self.attributes.get(i),
        )

    @overload
    def __getitem__(self, i: int) -> InvocationRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[InvocationRecord]: ...
    def __getitem__(self, i: int | slice) -> InvocationRecord | list[InvocationRecord]:
        if isinstance(i, slice):
            return [self.record(j) for j in range(len(self))[i]]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("record index out of range")
        return self.record(i)

    def __iter__(self) -> Iterator[InvocationRecord]:
        errors, attributes = self.errors, self.attributes
        rows = range(len(self))
        nothing = itertools.repeat(None)
        return map(
            InvocationRecord,
            self.puid,
            self.iid,
            self.parent,
            self.hid,
            self.tid,
            self.method,
            self.start_ns,
            map(_end_or_none, self.end_ns, self.ended),
            map(errors.get, rows) if errors else nothing,
            map(attributes.get, rows) if attributes else nothing,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(map(operator.eq, self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordColumns({len(self)} invocations)"

    def position(self, puid: int, iid: int) -> int:
        found: int = self._index.position(puid, iid)  # type: ignore[attr-defined]
        return found

    def parent_rows(self) -> array[int]:
        """Each row's parent's row in the same process; -1: none (0, not here, or itself)."""
        found: array[int] = self._index.parents(self.puid, self.parent)  # type: ignore[attr-defined]
        return found

    def unended(self) -> list[int]:
        """The rows without an end."""
        if self.ended.find(0) < 0:
            return []
        return list(itertools.compress(range(len(self)), map(operator.not_, self.ended)))


def _end_or_none(end: int, ended: int) -> int | None:
    return end if ended else None


def field(records: Sequence[InvocationRecord], name: str) -> Iterable[int]:
    """One integer field of every record, in order: the column itself when ``records`` are
    columns (``end_ns`` excepted: it has no None), else read from each record."""
    if isinstance(records, RecordColumns):
        found: array[int] = getattr(records, name)
        return found
    return map(operator.attrgetter(name), records)


def distinct_values(records: Sequence[InvocationRecord], name: str) -> set[int]:
    """The distinct values of one field; of columns' ``puid``, ``method`` and ``tid`` (which
    never change once read) kept for the next ask."""
    if not isinstance(records, RecordColumns):
        return set(field(records, name))
    if name not in _KEPT_DISTINCT:
        return _distinct(records, name)
    found = records.distinct.get(name)
    if found is None:
        found = records.distinct[name] = _distinct(records, name)
    return set(found)


def _distinct(records: RecordColumns, name: str) -> set[int]:
    assert _accel is not None  # columns come from the accelerator
    found: set[int] = _accel.distinct(getattr(records, name))
    return found


_KEPT_DISTINCT: Final = frozenset({"puid", "method", "tid"})


def process_pairs(
    records: Sequence[InvocationRecord], *names: str
) -> tuple[set[tuple[int, int]], ...]:
    """For each field in ``names``, the distinct (puid, field) pairs of ``records``: a million
    records of one process (the usual case) cost a set of ints per field, not a tuple each, and
    the processes are found once for every field."""
    puids = distinct_values(records, "puid")
    found: list[set[tuple[int, int]]] = []
    for name in names:
        if len(puids) == 1:
            [puid] = puids
            found.append({(puid, value) for value in distinct_values(records, name)})
        else:
            found.append(set(zip(field(records, "puid"), field(records, name), strict=True)))
    return tuple(found)


def on_threads(
    records: Sequence[InvocationRecord], threads: Collection[tuple[int, int]]
) -> Sequence[InvocationRecord]:
    """The records that ran on the given (puid, tid) threads (all of them when that is all)."""
    (present,) = process_pairs(records, "tid")
    wanted = {thread for thread in present if thread in threads}
    if wanted == present:
        return records
    if not wanted:
        return []
    pairs = zip(field(records, "puid"), field(records, "tid"), strict=True)
    return [
        records[i] for i in itertools.compress(range(len(records)), map(wanted.__contains__, pairs))
    ]


def handed_off(records: Sequence[InvocationRecord]) -> list[InvocationRecord]:
    """The records that continue a hand-off (a non-zero ``hid``): a few, even in a big tree."""
    if isinstance(records, RecordColumns):
        return [records.record(i) for i in itertools.compress(range(len(records)), records.hid)]
    return [r for r in records if r.hid]


def read_records(
    seq: bytes,
    batches: Iterable[StoredBatch],
    late_ends: LateEnds,
    late_attrs: LateAttributes,
    cache: BatchCache | None = None,
) -> Sequence[InvocationRecord]:
    """A sequence's records from its stored batches, as every store reads them: columns from
    the C reader when it is built, else ``unpack``'s list; with ``cache`` (decoded batches: a
    listing of many sequences, or the memory store without the reader) always ``unpack``."""
    if cache is None and _accel is not None:
        return unpack_columns(seq, batches, late_ends, late_attrs)
    return unpack(seq, batches, late_ends, late_attrs, cache)


def unpack_columns(
    seq: bytes, batches: Iterable[StoredBatch], late_ends: LateEnds, late_attrs: LateAttributes
) -> RecordColumns:
    """``stored_batches.unpack``'s records, as columns (module docstring). Needs the accelerator."""
    assert _accel is not None
    columns, errors, raw_attrs, index = _accel.gather(seq, batches)
    merged: dict[tuple[int, int], Attributes] = {}
    for puid, raw in raw_attrs:  # in each process's batch order: a later key wins
        event = _decode_attrs(raw)
        merged.setdefault((puid, event.iid), {}).update(event.attributes)
    found = RecordColumns(columns, errors, {}, index)
    del columns
    puids = distinct_values(found, "puid")  # in C: not a set of a million ints
    for puid, iid, _batch_no, blob in sorted(late_attrs(puids), key=lambda row: row[2]):
        merged.setdefault((puid, iid), {}).update(decode_attributes(blob))
    for (puid, iid), attributes in merged.items():
        row = found.position(puid, iid)
        if row >= 0:
            found.attributes[row] = attributes
    missing = found.unended()
    if missing:
        keys = [(found.puid[i], found.iid[i]) for i in missing]
        late = {(puid, iid): (end_ns, error) for puid, iid, end_ns, error in late_ends(keys)}
        for (puid, iid), (end_ns, error) in late.items():
            row = found.position(puid, iid)
            if row >= 0 and not found.ended[row]:
                found.end_ns[row] = end_ns
                found.ended[row] = 1
                if error is not None:
                    found.errors[row] = error
    return found

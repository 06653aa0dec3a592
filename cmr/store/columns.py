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
from cmr.store.stored_batches import Attributes, LateAttributes, LateEnds, StoredBatch, unpack
from cmr.store.summaries import BatchCache
from invoseq.wire import Attrs

if TYPE_CHECKING:
    from cmr.store._columns import GatheredColumns

_decode_attrs = msgspec.msgpack.Decoder(Attrs).decode
_decode_attributes = msgspec.json.Decoder(dict[str, str | int | float | bool]).decode
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
        return array("q", self._index.parents(self.puid, self.parent))  # type: ignore[attr-defined]

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


def subtree_sizes(held: array[int]) -> array[int]:
    """Per row, the calls beneath it (``held``: each row's caller, which comes before it). Needs
    the accelerator."""
    assert _accel is not None
    return array("q", _accel.subtree_sizes(held))


def profile_lines(
    records: RecordColumns, held: Sequence[int], names: array[int], ranks: array[int]
) -> tuple[array[int], ...]:
    """A start-ordered tree's profile lines (a line per distinct path of names from the root,
    row 0; ``held``: each row's caller, ``names``: each row's name id): each line's parent
    line, name id, calls, time and self time, in order of first appearance; then the lines but
    the root by parent, longest first, then by ``ranks[name]`` (the order
    ``profile.sort_profile`` gives a line's children); then each row's line. Needs the
    accelerator."""
    assert _accel is not None
    found = _accel.profile_lines(
        held, records.start_ns, records.end_ns, records.ended, names, ranks
    )
    return tuple(array("q", column) for column in found)


def thread_windows(records: RecordColumns) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Per thread (puid, tid), the union of its rows' windows as sorted disjoint windows (a
    window: ``[start, max(end, start + 1))``, unending when not ended), from one C pass per
    thread. Needs the accelerator."""
    assert _accel is not None
    (threads,) = process_pairs(records, "tid")
    args = (records.start_ns, records.end_ns, records.ended)
    if len(threads) == 1:
        return {thread: _accel.windows(None, *args) for thread in threads}
    pairs = list(zip(records.puid, records.tid, strict=True))
    found: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for thread in threads:
        rows = array("q", itertools.compress(range(len(pairs)), map(thread.__eq__, pairs)))
        found[thread] = _accel.windows(rows, *args)
    return found


def nested(records: RecordColumns, held: array[int]) -> bool:
    """Whether, with ``held`` each row's caller (every caller before its callees), each row's
    window lies within its caller's and after its previous sibling's: the calls open at any
    instant are then one chain. A window is ``[start, max(end, start + 1))``, unending when the
    row has not ended (``timeline.Call``'s). Needs the accelerator."""
    assert _accel is not None
    found: bool = _accel.nested(held, records.start_ns, records.end_ns, records.ended)
    return found


def spans(records: RecordColumns) -> array[int]:
    """Each row's duration (at least 0), or 2**63 for a row not ended: what the line budget
    ranks calls by (``budget.priority_of``), as an unsigned array. Needs the accelerator."""
    assert _accel is not None
    return array("Q", _accel.spans(records.start_ns, records.end_ns, records.ended))


def line_totals(
    held: array[int], line_of: array[int], own: dict[int, tuple[int, int]], lines: int
) -> tuple[array[int], array[int], bytes]:
    """Sample weights and CPU times summed up the callers as ``merge._total`` sums them (``own``:
    row -> the weight and CPU time it holds itself; ``held``: each row's caller), then per line
    (``line_of``: each row's line, of ``lines``): the weights, the CPU times where the weight
    is not 0, and whether there was one. Needs the accelerator."""
    assert _accel is not None
    rows = array("q", own)
    weights = array("q", [weight for weight, _cpu in own.values()])
    cpus = array("q", [cpu for _weight, cpu in own.values()])
    samples, cpu, sampled = _accel.line_totals(held, line_of, rows, weights, cpus, lines)
    return array("q", samples), array("q", cpu), sampled


def ranked(rows: array[int], priorities: array[int], limit: int) -> list[int]:
    """Positions in ``rows`` of the (at most ``limit``) highest ``priorities[row]`` (unsigned),
    highest first, ties in order: ``budget.rank`` in C. Needs the accelerator."""
    assert _accel is not None
    return array("q", _accel.ranked(rows, priorities, limit)).tolist()


def covered(records: RecordColumns, rows: array[int], start: int, end: int) -> int:
    """How much of the window ``[start, end)`` the union of the windows of ``rows`` (in start
    order) covers, each clipped to it, one not ended counting until ``end`` (as
    ``calltree.covered_in_order``). Needs the accelerator."""
    assert _accel is not None
    found: int = _accel.covered(rows, records.start_ns, records.end_ns, records.ended, start, end)
    return found


def take(values: array[int], rows: array[int]) -> array[int]:
    """``values[row]`` for each of ``rows``, in their order (ValueError: a row out of range).
    Needs the accelerator."""
    assert _accel is not None
    return array("q", _accel.take(values, rows))


def total_at(values: array[int], rows: array[int]) -> int:
    """The sum of ``values`` at ``rows``. Needs the accelerator."""
    assert _accel is not None
    total: int = _accel.total_at(values, rows)
    return total


def fold_sums(
    records: RecordColumns, rows: array[int], names: array[int]
) -> tuple[dict[int, tuple[int, int]], int, int]:
    """Of ``rows`` (``names``: each row's name id): per name id the calls and the ended ones'
    time, how many have not ended, and the ended ones' time in all (a duration at least 0).
    Needs the accelerator."""
    assert _accel is not None
    sums: tuple[dict[int, tuple[int, int]], int, int] = _accel.fold_sums(
        rows, names, records.start_ns, records.end_ns, records.ended
    )
    return sums


def shape_rows(records: RecordColumns, parents: array[int]) -> tuple[list[int], list[int], bool]:
    """The rows that continue a hand-off, the rows with neither a parent nor a hand-off, and
    whether the rows' starts increase strictly (``parents``: each row's parent row, for their
    number). Needs the accelerator."""
    assert _accel is not None
    handed, roots, ordered = _accel.shape_rows(
        parents, records.parent, records.hid, records.start_ns
    )
    return array("q", handed).tolist(), array("q", roots).tolist(), ordered


def hang(parents: array[int], root: int) -> array[int] | None:
    """Each row's caller as the tree hangs it (``parents``: each row's parent row, -1: none
    here, then it hangs under ``root``; the root under none, -1), or None when a parent comes
    after its row. Needs the accelerator."""
    assert _accel is not None
    held = _accel.hang(parents, root)
    return None if held is None else array("q", held)


def children(held: array[int]) -> tuple[array[int], array[int]]:
    """The rows each row holds (``held``: each row's caller, -1 for none), in row order: row r's
    are ``rows[starts[r]:starts[r + 1]]``. Needs the accelerator."""
    assert _accel is not None
    starts, rows = _accel.children(held)
    return array("q", starts), array("q", rows)


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
    puids = set(found.puid) if len(found) else set()
    for puid, iid, _batch_no, blob in sorted(late_attrs(puids), key=lambda row: row[2]):
        merged.setdefault((puid, iid), {}).update(_decode_attributes(blob))
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

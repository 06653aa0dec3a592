"""The memory store's indexes over listing keys (``cmr.store.listing_sql`` has the SQL stores'):
each sequence's root name, end and exception as its batches set them, with a set of sequences
per decided root name, per duration bucket (the duration's bit length: a bucket holds durations
within a factor of two), of those whose root raised, and of those undecided. A query's
candidates are the intersection of the sets its fields name (``candidates``: counted before
built, and given up when too many to beat a walk by start); the store orders them itself, and
the line has the last word (``listing.wanted``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import NamedTuple

from cmr.store.base import STATUS_ERROR, SequenceQuery


class RowKeys(NamedTuple):
    """What a SQL store keeps on a sequence's row (``root_name`` None: undecided)."""

    root_name: str | None
    end_ns: int | None
    error: str | None


def _bucket(duration: int) -> int:
    return max(duration, 0).bit_length()


class KeyIndex:
    """Sets of sequences by root name, duration bucket, error, and undecided."""

    def __init__(self) -> None:
        self._keys: dict[bytes, tuple[RowKeys, int]] = {}  # seq -> (keys, start_ns)
        self._by_name: defaultdict[str, set[bytes]] = defaultdict(set)
        self._by_bucket: defaultdict[int, set[bytes]] = defaultdict(set)
        self._failed: set[bytes] = set()
        self._undecided: set[bytes] = set()

    def keys(self, seq: bytes) -> RowKeys:
        return self._keys[seq][0]

    def put(self, seq: bytes, keys: RowKeys, start_ns: int) -> None:
        """The sequence's keys as its latest batch left them (and its start, which the duration
        is measured from)."""
        if self._keys.get(seq) == (keys, start_ns):
            return
        self.remove(seq)
        self._keys[seq] = (keys, start_ns)
        if keys.root_name is None:
            self._undecided.add(seq)
            return
        self._by_name[keys.root_name].add(seq)
        if keys.end_ns is not None:
            self._by_bucket[_bucket(keys.end_ns - start_ns)].add(seq)
        if keys.error is not None:
            self._failed.add(seq)

    def remove(self, seq: bytes) -> None:
        known = self._keys.pop(seq, None)
        if known is None:
            return
        keys, start_ns = known
        self._undecided.discard(seq)
        if keys.root_name is not None:
            self._by_name[keys.root_name].discard(seq)
        if keys.end_ns is not None:
            self._by_bucket[_bucket(keys.end_ns - start_ns)].discard(seq)
        self._failed.discard(seq)

    def undecided(self) -> set[bytes]:
        return self._undecided

    def longest_first(self) -> Iterator[set[bytes]]:
        """The decided, ended sequences a duration bucket at a time, longest bucket first:
        every duration in a bucket is longer than every one in the buckets after it."""
        for bucket in sorted(self._by_bucket, reverse=True):
            yield self._by_bucket[bucket]

    def candidates(
        self, query: SequenceQuery | None, names: list[str] | None, limit: int
    ) -> set[bytes] | None:
        """The sequences the query's root names, durations and error status may want, the
        undecided ones among them; None when no index narrows the query to ``limit`` or
        fewer (walk by start instead). Sizes are counted before any set is built."""
        if query is None:
            return None
        fields: list[list[set[bytes]]] = []  # each field: the union of these sets
        if query.root is not None and names is not None:
            fields.append([self._by_name[name] for name in names if name in self._by_name])
        if query.min_duration_ns is not None or query.max_duration_ns is not None:
            low = _bucket(query.min_duration_ns or 0)
            high = max(self._by_bucket, default=0)
            if query.max_duration_ns is not None:
                high = min(high, _bucket(query.max_duration_ns))
            fields.append(
                [self._by_bucket[b] for b in range(low, high + 1) if b in self._by_bucket]
            )
        if query.status == STATUS_ERROR:
            fields.append([self._failed])
        if not fields:
            return None
        fields.sort(key=lambda sets: sum(map(len, sets)))
        if sum(map(len, fields[0])) > limit:
            return None
        found: set[bytes] = set().union(*fields[0])
        for other in fields[1:]:
            found = {seq for seq in found if any(seq in sets for sets in other)}
        return found | self._undecided

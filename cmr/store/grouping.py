"""What the batches one transaction stores add to their sequences' summaries, merged
(``group_parts``): a sequence several of them carry is written once, after every batch's late
Ends (docs/architecture.md, "Group commit")."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from cmr.store.batch_index import PackedBatch
from cmr.store.stored_batches import LateEnd
from cmr.store.summaries import RootRow, SummaryParts


@dataclass(frozen=True, slots=True)
class GroupParts:
    """What the batches one transaction stores add to their sequences' summaries, as one
    batch's would be: a sequence that several of them carry is written once (``group_parts``)."""

    summary: SummaryParts
    first_start: dict[bytes, int]  # seq -> its earliest Start in the group, wall clock
    late_ends: list[LateEnd]  # the batches' first of each invocation, in the batches' order


def group_parts(packs: Sequence[PackedBatch]) -> GroupParts:
    """The summary parts of ``packs`` (the batches a transaction stored, in the order it stored
    them) merged: Start counts added, each sequence's earliest Start and lowest-ranked root
    candidate kept (the first of equal ones, as the stores' upserts keep), the first late End of
    each invocation (a forged repeat, in a later batch or the same one, changes nothing),
    threads, entries and open invocations together. A store writes them after every batch's
    late Ends are stored, so an invocation a later batch of the group ends is never opened."""
    late_ends = _first_late_ends(packs)
    if len(packs) == 1:
        [only] = packs
        return GroupParts(only.summary, only.first_start, late_ends)
    first_start: dict[bytes, int] = {}
    for packed in packs:
        first_start.update(packed.first_start)
    if len(first_start) == sum(len(packed.first_start) for packed in packs):
        return GroupParts(_disjoint(packs), first_start, late_ends)
    return GroupParts(*_merged(packs), late_ends)


def only(packed: PackedBatch, seqs: Collection[bytes]) -> PackedBatch:
    """``packed`` with the summary parts and earliest Starts of ``seqs`` alone (its sequences
    that are not single rows: ``cmr.store.single_rows``); its entries, open invocations and late
    Ends whole (a single row has none of the first two; the last are not a sequence's)."""
    parts = packed.summary
    counts, first_start = parts.counts, packed.first_start
    return dataclasses.replace(
        packed,
        first_start={seq: first_start[seq] for seq in seqs if seq in first_start},
        summary=SummaryParts(
            counts=Counter({seq: counts[seq] for seq in seqs if seq in counts}),
            threads={row for row in parts.threads if row[0] in seqs},
            roots=[row for row in parts.roots if row[0] in seqs],
            entries=parts.entries,
            opened=parts.opened,
        ),
    )


def _disjoint(packs: Sequence[PackedBatch]) -> SummaryParts:
    """``group_parts``' summary when no sequence has Starts in two of ``packs`` (requests: each
    sequence in one batch): every sequence's count and root come from one batch, so the parts
    are put side by side, with no merge per sequence."""
    merged = SummaryParts()
    for packed in packs:
        parts = packed.summary
        dict.update(merged.counts, parts.counts)  # no key twice: Counter.update would add
        merged.threads |= parts.threads
        merged.entries += parts.entries
        merged.opened += parts.opened
        merged.roots += parts.roots
    return merged


def _merged(packs: Sequence[PackedBatch]) -> tuple[SummaryParts, dict[bytes, int]]:
    """``group_parts``' summary and earliest Starts, merged sequence by sequence."""
    merged = SummaryParts()
    first_start: dict[bytes, int] = {}
    roots: dict[bytes, RootRow] = {}
    for packed in packs:
        parts = packed.summary
        merged.counts.update(parts.counts)
        merged.threads |= parts.threads
        merged.entries += parts.entries
        merged.opened += parts.opened
        for seq, start in packed.first_start.items():
            known = first_start.get(seq)
            first_start[seq] = start if known is None or start < known else known
        for row in parts.roots:
            best = roots.get(row[0])
            if best is None or row[1:6] < best[1:6]:
                roots[row[0]] = row
    merged.roots = list(roots.values())
    return merged, first_start


def _first_late_ends(packs: Sequence[PackedBatch]) -> list[LateEnd]:
    """The late Ends of ``packs`` in the order the stores insert them, only the first of each
    invocation: the one the stores keep (first write wins for an event key)."""
    late_ends: list[LateEnd] = []
    ended: set[tuple[int, int]] = set()
    for packed in packs:
        for end in packed.late_ends:
            key = (end[0], end[1])
            if key not in ended:
                ended.add(key)
                late_ends.append(end)
    return late_ends

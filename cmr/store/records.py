"""The records of the repository that a listing does not need: an invocation, a thread, a
hand-off, a sample and its frames, a whole sequence's data, the store's counters. They are
``cmr.store.base``'s (which loads this module when one is first asked for there): ``cmr ls``
loads neither them nor msgspec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:  # annotations only: base loads this module, not the other way round
    from cmr.store.base import MethodRecord, ProcessRecord


class InvocationRecord(msgspec.Struct, frozen=True, gc=False):
    """One invocation as stored. A msgspec Struct rather than a dataclass: a tree of a million
    calls builds a million of these, at a tenth of a frozen dataclass's cost each."""

    puid: int
    iid: int
    parent: int  # iid of the enclosing invocation in the same process, 0 for none
    hid: int  # hand-off continued by this invocation, 0 for none
    tid: int
    method: int
    start_ns: int
    end_ns: int | None  # None while running
    error: str | None  # exception type name when the invocation raised
    # Key/value pairs recorded for the invocation (``wire.Attrs``), e.g. an OpenTelemetry span's.
    attributes: dict[str, str | int | float | bool] | None = None


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    native_id: int
    name: str


@dataclass(frozen=True, slots=True)
class HandoffRecord:
    """Work that left an invocation for another thread, task or process, as its submitter recorded
    it. ``hid`` is unique across processes, so the invocations that continue the work (their
    ``hid``) find it by ``hid`` alone."""

    hid: int
    puid: int  # the submitting process
    parent: int  # iid of the submitting invocation in that process, 0 for none
    kind: str  # thread | task | process | remote
    method: int  # the callable handed off (a method id of the submitting process)
    submitted_ns: int


@dataclass(frozen=True, slots=True)
class FrameRecord:
    """An interned code location of a sampled stack."""

    file: str
    function: str  # the code's qualified name
    line: int  # its first line


@dataclass(frozen=True, slots=True)
class SampleRecord:
    """One stack sample (or ``weight`` collapsed identical ones) of one thread; wall-clock times."""

    puid: int
    tid: int
    t_ns: int
    weight: int
    duration_ns: int
    cpu_ns: int
    frames: tuple[int, ...]  # frame ids, outermost first
    lines: tuple[int, ...]
    # The instants its first and last ticks saw the stack (wall clock), None when its tracer did
    # not send them (it predates them): then they fell somewhere in its span.
    ticks: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class SamplerRecord:
    """A process's stack sampler accounting, as of its latest report (all cumulative)."""

    mode: str  # wall | cpu
    interval_ms: int
    ticks: int
    late_ticks: int  # ticks that started more than one interval after the previous one
    cost_ns: int  # time the sampler itself spent
    # The interval it paced itself to as of the report, and the longest it used (0 for both: a
    # tracer that predates pacing, or a report stored before; it ticked at interval_ms).
    current_interval_ns: int = 0
    longest_interval_ns: int = 0
    dropped_samples: int = 0  # refused while its queue to the sender was full


@dataclass(frozen=True, slots=True)
class SequenceData:
    """Everything needed to rebuild one sequence's tree."""

    seq: bytes
    # In (start, puid, iid) order: a list, or ``columns.RecordColumns`` (a big tree's reader walks
    # its arrays instead of the records).
    invocations: Sequence[InvocationRecord]
    methods: dict[tuple[int, int], MethodRecord]  # (puid, method id)
    threads: dict[tuple[int, int], ThreadRecord]  # (puid, tid)
    processes: dict[int, ProcessRecord]  # puid
    # The sequence's hand-offs and those its invocations continue, by hid.
    handoffs: dict[int, HandoffRecord] = field(default_factory=dict)
    # Samples of the sequence's threads taken inside its invocations' windows, and their frames.
    samples: list[SampleRecord] = field(default_factory=list)
    frames: dict[tuple[int, int], FrameRecord] = field(default_factory=dict)  # (puid, frame id)
    # Processes that reported dropping events of this sequence (``Batch.lost_seqs``), or events
    # of sequences they could not name at a time the sequence overlaps (``lost_windows``); each
    # is also in ``processes``. Not empty: the tree may miss calls.
    lost_by: frozenset[int] = frozenset()
    # Of those, the processes whose windows of unnamed drops (``Batch.lost_windows``, wall
    # clock) the sequence overlaps: puid -> (first_ns, last_ns) of the windows it overlaps.
    lost_windows: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Calls a view left out (``cmr.views.tree.hops``), counted on their caller: (puid, iid) ->
    # count.
    folded: dict[tuple[int, int], int] = field(default_factory=dict)
    folded_threads: frozenset[tuple[int, int]] = frozenset()  # (puid, tid) they ran on
    # The sampler's gaps in its processes that overlap its invocations: from ``t_ns``, for
    # ``duration_ns``, the sampler read no thread (``weight``: the ticks it missed); no frames.
    gaps: list[SampleRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StoreStats:
    batches: int
    duplicate_batches: int
    events: int
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> frames
    processes: list[ProcessRecord] = field(default_factory=list)
    samples: int = 0  # sample records stored (a collapsed sample counts once)
    samplers: dict[int, SamplerRecord] = field(default_factory=dict)  # puid -> latest report


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What ``Store.prune`` removed."""

    sequences: int  # whole sequences, with their invocations, hand-offs and lossy marks
    samples: int  # sample records
    processes: int  # processes with nothing left in the repository, with their names

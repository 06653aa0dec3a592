"""The storage interface of the repository, and the plain records it returns.

A store takes decoded batches (``ingest``) and answers the read side (``list_sequences``,
``resolve_sequence``, ``load_sequence``, ``stats``). Every backend passes the same contract tests
(``tests/cmr/store/test_contract.py``). Times in records are wall-clock nanoseconds: the store
converts each process's monotonic event times with that process's clock offset at ingest.

Whether a process is *lost* is not stored: it depends on how long it has been silent, so every
read computes it against the store's clock (``ProcessRecord.lost``).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

import msgspec

from invoseq.wire import Batch


class StoreError(Exception):
    """A store could not do what was asked (a clear message for the user)."""


class InvalidBatchError(StoreError):
    """A batch that decoded but can never be stored (its times overflow once made wall-clock)."""


#: What became of each batch of a group (``Store.ingest_many``): True stored, False stored
#: before, or the error that refused it.
Outcome: TypeAlias = bool | InvalidBatchError


class UnknownSequenceError(StoreError):
    pass


class AmbiguousSequenceError(StoreError):
    pass


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
class MethodRecord:
    module: str
    qualname: str
    file: str
    line: int


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    native_id: int
    name: str


#: Process states (``ProcessRecord.state``): still sending, shut down cleanly, or gone silent.
ProcessState: TypeAlias = Literal["alive", "ended", "lost"]
PROCESS_ALIVE: Final = "alive"
PROCESS_ENDED: Final = "ended"
PROCESS_LOST: Final = "lost"

#: The name of the made-up root of a sequence that a foreign system started: its first
#: invocations here continue hand-offs that no process of this repository recorded.
REMOTE_PARENT: Final = "<remote parent>"


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    puid: int
    pid: int
    host: str
    platform_id: str
    argv: tuple[str, ...]
    ended: bool  # the process shut down cleanly: its open invocations will never end
    dropped: int  # events the process reported it could not send
    last_seen_ns: int  # when the repository received its latest batch (the store's clock)
    heartbeat_ms: int = 0  # it promised a batch at least this often (0: no promise)
    # Silent past the heartbeat bound when read (never for an ended process): its open
    # invocations will never end either.
    lost: bool = False

    @property
    def state(self) -> ProcessState:
        """``ended`` wins over ``lost``: a process that said goodbye did not die."""
        if self.ended:
            return PROCESS_ENDED
        return PROCESS_LOST if self.lost else PROCESS_ALIVE

    @property
    def finished(self) -> bool:
        """Its open invocations will never end: it ended, or it is lost."""
        return self.ended or self.lost


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
    # Processes that reported dropping events of this sequence (``Batch.lost_seqs``); each is
    # also in ``processes``. Not empty: the tree may miss calls.
    lost_by: frozenset[int] = frozenset()
    # Calls a view left out (``cmr.views.hops``), counted on their caller: (puid, iid) -> count.
    folded: dict[tuple[int, int], int] = field(default_factory=dict)
    folded_threads: frozenset[tuple[int, int]] = frozenset()  # (puid, tid) they ran on
    # The sampler's gaps in its processes that overlap its invocations: from ``t_ns``, for
    # ``duration_ns``, the sampler read no thread (``weight``: the ticks it missed); no frames.
    gaps: list[SampleRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SequenceSummary:
    seq: bytes
    root: str  # qualified name of the root invocation, or REMOTE_PARENT
    start_ns: int
    end_ns: int | None  # None while the root is still running (or never ended)
    invocations: int
    threads: int
    processes: int
    status: str  # running | complete | incomplete
    lossy: bool = False  # a process reported dropping some of its events
    error: str | None = None  # the exception type the root call raised, if it did


SORT_START: Final = "start"
SORT_DURATION: Final = "duration"
#: ``SequenceQuery.status``: ``error`` is a complete sequence whose root raised; ``complete``
#: one whose root did not.
STATUS_ERROR: Final = "error"
LISTED_STATUSES: Final = ("complete", "running", "incomplete", STATUS_ERROR)


@dataclass(frozen=True, slots=True)
class SequenceQuery:
    """Which listing lines ``Store.list_sequences`` gives, and in which order. A store reads the
    lines of the sequences that started in [since_ns, until_ns] and ran on ``host``, by index,
    newest first, and ``summaries.wanted`` keeps those the other fields ask for."""

    root: str | None = None  # an fnmatch pattern the root's name matches (case-sensitive)
    min_duration_ns: int | None = None  # a sequence not ended has no duration: it never passes
    max_duration_ns: int | None = None
    status: str | None = None  # one of LISTED_STATUSES
    since_ns: int | None = None  # it started at or after (wall clock)
    until_ns: int | None = None  # it started at or before
    host: str | None = None  # one of its processes ran on this host
    sort: str = SORT_START  # SORT_START: newest first; SORT_DURATION: longest first

    @property
    def by_lines_only(self) -> bool:
        """Whether only what the store reads by index selects (no field asks more)."""
        return (
            self.root is None
            and self.min_duration_ns is None
            and self.max_duration_ns is None
            and self.status is None
            and self.sort == SORT_START
        )


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


class Store(abc.ABC):
    """A repository backend. Implementations must be safe to use from one thread at a time."""

    @abc.abstractmethod
    def ingest(self, batch: Batch, received_ns: int) -> bool:
        """Store one batch durably, in one transaction. Returns False (and stores nothing) when
        (puid, batch_no) was already stored. The sequences in ``lost_seqs`` become lossy (for
        good: a process reports a sequence once it dropped any of its events)."""

    def ingest_many(
        self,
        batches: Sequence[Batch],
        received_ns: int,
        bodies: Sequence[bytes] | None = None,
    ) -> list[Outcome]:
        """Store several batches, each as ``ingest`` would, in one transaction where the store
        has them (a group commit: ``cmr serve`` hands over the batches waiting when it looks).
        ``bodies``: the msgpack each batch was decoded from, if the caller has it (a store may
        keep the thread chunks as they came instead of encoding them again).
        Per batch, in order: True stored, False stored before, or the InvalidBatchError that
        refused it (nothing of that batch is stored; the others are). Any other failure raises
        and leaves the batches unacknowledged: each was stored whole or not at all, and a batch
        sent again is stored once."""
        outcomes: list[Outcome] = []
        for batch in batches:
            try:
                outcomes.append(self.ingest(batch, received_ns))
            except InvalidBatchError as exc:
                outcomes.append(exc)
        return outcomes

    @abc.abstractmethod
    def record_rejected(self, reason: str, count: int = 1) -> None:
        """Count frames the server rejected, by reason (``garbage``, ``version``, ...)."""

    @abc.abstractmethod
    def list_sequences(
        self, limit: int, query: SequenceQuery | None = None
    ) -> list[SequenceSummary]:
        """Up to ``limit`` listing lines, the most recent sequences first (by their first
        start), or those ``query`` asks for in the order it asks."""

    @abc.abstractmethod
    def resolve_sequence(self, prefix: str) -> bytes:
        """The sequence whose hex id starts with ``prefix`` (case-insensitive).

        Raises UnknownSequenceError or AmbiguousSequenceError with a one-line message."""

    @abc.abstractmethod
    def load_sequence(self, seq: bytes, *, samples: bool = True) -> SequenceData:
        """All records of one sequence. Raises UnknownSequenceError.

        With ``samples``, also the samples of each thread the sequence ran on that overlap the
        window of one of its invocations there (``[t, t + duration)`` meets ``[start, end)``;
        an open invocation's window has no end), and the frames they use. Without, the two stay
        empty and cost nothing: a tree shown without samples never reads them."""

    @abc.abstractmethod
    def find_sequences(self, method: str, *, since_ns: int | None, limit: int) -> list[bytes]:
        """The sequences holding an invocation of ``method`` (``module.qualname`` as trees name
        it, or the bare qualname) whose first start is at or after ``since_ns``, most recent
        first, at most ``limit``."""

    @abc.abstractmethod
    def prune(self, before_ns: int) -> PruneResult:
        """Retention: remove every sequence whose first start (``SequenceSummary.start_ns``) is
        before ``before_ns`` (wall-clock), whole: its invocations, hand-offs and lossy marks; the
        samples taken before ``before_ns``; the record of batches received before it; and every
        process last seen before it that has nothing left (its methods, threads and frames go
        with it). Counters in ``stats`` (batches, events, samples) are totals ever received and
        stay. One transaction; safe while ``cmr serve`` writes."""

    @abc.abstractmethod
    def stats(self) -> StoreStats: ...

    @abc.abstractmethod
    def close(self) -> None: ...


def names_method(module: str, qualname: str, name: str) -> bool:
    """Whether ``name`` names the method: its full name as trees show it (``qualified_name``), or
    its bare qualname. SQL backends restate this next to where it is named."""
    return qualname == name or (bool(module) and f"{module}.{qualname}" == name)


class GroupCommitStore(Store):
    """A store that writes a group of batches in one transaction: its ``ingest_many`` is the
    real thing, and ``ingest`` is a group of one."""

    def ingest(self, batch: Batch, received_ns: int) -> bool:
        (outcome,) = self.ingest_many([batch], received_ns)
        if isinstance(outcome, InvalidBatchError):
            raise outcome
        return outcome

    @abc.abstractmethod
    def ingest_many(
        self,
        batches: Sequence[Batch],
        received_ns: int,
        bodies: Sequence[bytes] | None = None,
    ) -> list[Outcome]:
        """As ``Store.ingest_many``, in one transaction."""

"""The storage interface of the repository, and the plain records it returns.

A store takes decoded batches (``ingest``) and answers the read side (``list_sequences``,
``resolve_sequence``, ``load_sequence``, ``stats``). Every backend passes the same contract tests
(``tests/cmr/store/test_contract.py``). Times in records are wall-clock nanoseconds: the store
converts each process's monotonic event times with that process's clock offset at ingest.

Whether a process is *lost* is not stored: it depends on how long it has been silent, so every
read computes it against the store's clock (``ProcessRecord.lost``).
"""

# ruff: noqa: PLC0414 (``import X as X``: the records are re-exported, as mypy reads it)

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from invoseq.events import SERVICE_MODULE

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # the records a listing needs not, and the protocol: loaded on use (below)
    from typing import Final, Literal, TypeAlias

    from cmr.store.records import FrameRecord as FrameRecord
    from cmr.store.records import HandoffRecord as HandoffRecord
    from cmr.store.records import InvocationRecord as InvocationRecord
    from cmr.store.records import PruneResult as PruneResult
    from cmr.store.records import SampleRecord as SampleRecord
    from cmr.store.records import SamplerRecord as SamplerRecord
    from cmr.store.records import SequenceData as SequenceData
    from cmr.store.records import StoreStats as StoreStats
    from cmr.store.records import ThreadRecord as ThreadRecord
    from invoseq.wire import Batch


#: Records that live in ``cmr.store.records``, loaded when first asked for here (PEP 562): a
#: listing (``cmr ls``) needs none of them, and ``InvocationRecord`` loads msgspec.
_RECORDS: Final = frozenset(
    {
        "FrameRecord",
        "HandoffRecord",
        "InvocationRecord",
        "PruneResult",
        "SampleRecord",
        "SamplerRecord",
        "SequenceData",
        "StoreStats",
        "ThreadRecord",
    }
)


def __getattr__(name: str) -> object:
    if name in _RECORDS:
        from cmr.store import records

        return getattr(records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class StoreError(Exception):
    """A store could not do what was asked (a clear message for the user)."""


class InvalidBatchError(StoreError):
    """A batch that decoded but can never be stored (its times overflow once made wall-clock)."""


#: What became of each batch of a group (``Store.ingest_many``): True stored, False stored
#: before, or the error that refused it.
Outcome: TypeAlias = bool | InvalidBatchError


class UnknownSequenceError(StoreError):
    pass


#: Hex digits of a sequence id printed at least where it is shortened (``cmr ls``, ``cmr tail``,
#: the report ``tracer run`` prints): more where a neighbouring id shares them, as git does.
SEQ_PREFIX_MIN: Final = 12

#: The ids just below and just above a sequence's among all those stored (None at either end).
Neighbours: TypeAlias = "tuple[bytes | None, bytes | None]"
#: ``on_step(done, total)``: how far a long operation (``prune``) has gone, for progress.
OnStep: TypeAlias = "Callable[[int, int], None]"


def unique_prefix(seq: bytes, neighbours: Neighbours, minimum: int = SEQ_PREFIX_MIN) -> str:
    """The shortest prefix of ``seq``'s hex id, of at least ``minimum`` digits, that no other
    id starts with: one digit past what it shares with the nearer of its two neighbours in
    sorted order (no id between them can share more)."""
    digits = minimum
    value = int.from_bytes(seq, "big")
    for other in neighbours:
        if other is not None and other != seq:
            differ = value ^ int.from_bytes(other, "big")
            shared = (len(seq) * 8 - differ.bit_length()) // 4  # leading hex digits in common
            digits = max(digits, shared + 1)
    return seq.hex()[:digits]


class AmbiguousSequenceError(StoreError):
    pass


@dataclass(frozen=True, slots=True)
class MethodRecord:
    module: str
    qualname: str
    file: str
    line: int


#: Process states (``ProcessRecord.state``): still sending, shut down cleanly, or gone silent.
ProcessState: TypeAlias = 'Literal["alive", "ended", "lost"]'
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
#: The kinds of sequence a listing selects: requests (what a service serves: every sequence but
#: a service one), a process's service sequences (rooted in ``SERVICE_MODULE``), or all.
KIND_REQUEST: Final = "request"
KIND_SERVICE: Final = "service"
KIND_ALL: Final = "all"
KINDS: Final = (KIND_REQUEST, KIND_SERVICE, KIND_ALL)
_SERVICE_PREFIX: Final = SERVICE_MODULE + "."


def kind_of(root: str) -> str:
    """The kind of the sequence whose root is named ``root``: service or request."""
    return KIND_SERVICE if root.startswith(_SERVICE_PREFIX) else KIND_REQUEST


def shown_status(state: str, root_error: str | None) -> str:
    """The one status word every surface shows for a sequence (``cmr ls``, ``show``, ``tail``,
    the reports, ``cmr ui``): its state (running, incomplete or complete), but ``error`` for a
    complete sequence whose root call raised (``root_error``: the exception's type, or None).
    JSON keeps the two apart: the state as ``status`` and the exception as ``error``."""
    if state == "complete" and root_error is not None:
        return STATUS_ERROR
    return state


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
    kind: str = KIND_ALL  # one of KINDS (the CLI's default: KIND_REQUEST)

    @property
    def by_lines_only(self) -> bool:
        """Whether only what the store reads by index selects (no field asks more)."""
        return (
            self.root is None
            and self.min_duration_ns is None
            and self.max_duration_ns is None
            and self.status is None
            and self.sort == SORT_START
            and self.kind == KIND_ALL
        )


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
    def neighbours(self, seqs: Sequence[bytes]) -> dict[bytes, Neighbours]:
        """For each of ``seqs``, the stored ids just below and just above it in sorted order
        (None at either end): a few index lookups each, whatever the repository holds."""

    def short_ids(self, seqs: Sequence[bytes]) -> dict[bytes, str]:
        """The shortest unique prefix of each of ``seqs`` (``unique_prefix``) among all the
        sequences stored: what ``cmr ls`` prints, and ``resolve_sequence`` resolves."""
        around = self.neighbours(seqs) if seqs else {}
        return {seq: unique_prefix(seq, around.get(seq, (None, None))) for seq in seqs}

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
    def prune(self, before_ns: int, *, on_step: OnStep | None = None) -> PruneResult:
        """Retention: remove every sequence whose first start (``SequenceSummary.start_ns``) is
        before ``before_ns`` (wall-clock), whole: its invocations, hand-offs and lossy marks; the
        samples taken before ``before_ns``; the record of batches received before it; and every
        process last seen before it that has nothing left (its methods, threads and frames go
        with it). Counters in ``stats`` (batches, events, samples) are totals ever received and
        stay. One transaction; safe while ``cmr serve`` writes. ``on_step(done, total)`` after
        each of its statements, for progress (a store whose prune is quick may never call it)."""

    def share_writes(self) -> None:  # noqa: B027 (optional: most stores have nothing to do)
        """Other processes will store into this repository at the same time (``cmr serve
        --workers``): a store whose writers can coordinate better than by waiting on each other
        does so from now on. Nothing by default."""

    def serving(self) -> None:  # noqa: B027 (optional: most stores have nothing to do)
        """A server writes this repository steadily from now on (``cmr serve``): a store with
        upkeep it can do beside the writes, rather than inside one of them, starts doing so.
        Nothing by default."""

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

"""The wire protocol between a traced process and the repository. ``docs/protocol.md`` specifies
every message; keep the two in step.

More in docs/architecture.md, "invoseq/wire.py".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final

import msgspec

import invoseq
from invoseq.events import (
    HANDOFF_KINDS,
    MAX_ATTRIBUTE_VALUE,
    MAX_ATTRIBUTES,
    TAG_ATTRS,
    TAG_END,
    TAG_ERROR,
    TAG_HANDOFF,
    TAG_START,
    HandoffKind,
)

__all__ = [
    "ACCEPTED_VERSIONS",
    "ACK_HEADER",
    "BATCH_HEADER",
    "DEFAULT_ENDPOINT",
    "HANDOFF_KINDS",
    "I64",
    "KIND_ACK",
    "KIND_BATCH",
    "MAGIC",
    "MAX_ARGV",
    "MAX_ATTRIBUTES",
    "MAX_ATTRIBUTE_VALUE",
    "MAX_CHUNKS_PER_BATCH",
    "MAX_EVENTS_PER_CHUNK",
    "MAX_FRAME_BYTES",
    "MAX_INFOS_PER_BATCH",
    "MAX_LOST_SEQS",
    "MAX_LOST_WINDOWS",
    "MAX_NAME",
    "MAX_PATH",
    "MAX_SAMPLES_PER_BATCH",
    "MAX_STACK_DEPTH",
    "PROTOCOL_VERSION",
    "TAG_ATTRS",
    "TAG_END",
    "TAG_ERROR",
    "TAG_HANDOFF",
    "TAG_START",
    "U64",
    "Ack",
    "AttributeValue",
    "Attrs",
    "Batch",
    "End",
    "Error",
    "Event",
    "FrameInfo",
    "Handoff",
    "HandoffKind",
    "Id63",
    "LostWindow",
    "MethodInfo",
    "Name",
    "Path",
    "ProcessInfo",
    "Sample",
    "SamplerReport",
    "SeqId",
    "Start",
    "ThreadChunk",
    "ThreadInfo",
    "batch_layout",
    "event_count",
    "header",
    "process_layout",
]

#: Where a traced process sends and ``cmr serve`` listens when nobody configured either.
DEFAULT_ENDPOINT: Final = invoseq.DEFAULT_ENDPOINT

PROTOCOL_VERSION: Final = 5
#: Versions the repository accepts: each newer version only added optional fields or events.
ACCEPTED_VERSIONS: Final = frozenset({4, 5})
MAGIC: Final = b"IVSQ"

KIND_BATCH: Final = 1
KIND_ACK: Final = 2


# Size limits, enforced by typed decoding in the repository.
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
MAX_EVENTS_PER_CHUNK: Final = 1_000_000
MAX_CHUNKS_PER_BATCH: Final = 65_536
MAX_INFOS_PER_BATCH: Final = 1_000_000
MAX_NAME: Final = 1024
MAX_PATH: Final = 4096
MAX_ARGV: Final = 64
MAX_STACK_DEPTH: Final = 512
MAX_SAMPLES_PER_BATCH: Final = 1_000_000
MAX_LOST_SEQS: Final = 1024
MAX_LOST_WINDOWS: Final = 64

U64 = Annotated[int, msgspec.Meta(ge=0, le=2**64 - 1)]
#: Ids stored as SQLite INTEGER must fit a signed 64-bit integer.
Id63 = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Name = Annotated[str, msgspec.Meta(max_length=MAX_NAME)]
Path = Annotated[str, msgspec.Meta(max_length=MAX_PATH)]
SeqId = Annotated[bytes, msgspec.Meta(min_length=16, max_length=16)]


def header(kind: int) -> bytes:
    """The first frame of every message."""
    return MAGIC + bytes((PROTOCOL_VERSION, kind))


BATCH_HEADER: Final = header(KIND_BATCH)
ACK_HEADER: Final = header(KIND_ACK)


# The events are the objects a batch decodes thousands of: none can hold a reference cycle (their
# fields are numbers, strings and an Attrs' dict of them), so the garbage collector does not track
# them (``gc=False``: no tracking as each is made and freed, and nothing for a collection to visit).
class Start(msgspec.Struct, array_like=True, tag=TAG_START, frozen=True, gc=False):
    """An invocation began. ``parent`` is the enclosing invocation's iid in the same process
    (0 for a root); ``hid`` is the hand-off it continues (0 for none); ``seq`` its sequence."""

    iid: Id63
    parent: Id63
    hid: Id63
    method: Id63
    t_ns: I64
    seq: SeqId


class End(msgspec.Struct, array_like=True, tag=TAG_END, frozen=True, gc=False):
    """An invocation returned (or its generator was exhausted or closed)."""

    iid: Id63
    t_ns: I64


class Error(msgspec.Struct, array_like=True, tag=TAG_ERROR, frozen=True, gc=False):
    """An invocation ended by raising ``error`` (the exception's type name)."""

    iid: Id63
    t_ns: I64
    error: Name


class Handoff(msgspec.Struct, array_like=True, tag=TAG_HANDOFF, frozen=True, gc=False):
    """Work left the current invocation: submitted to a thread pool, a new thread, an asyncio task
    (and later a process). Recorded by the submitting thread; the first invocation on the other side
    carries ``hid`` in its Start. ``method`` names the callable handed off (a node is shown for it
    even when it runs no traced function); ``parent`` is the submitting invocation (0: none)."""

    hid: Id63
    parent: Id63
    kind: Annotated[str, msgspec.Meta(max_length=16)]
    method: Id63
    t_ns: I64
    seq: SeqId


AttributeValue = Annotated[str, msgspec.Meta(max_length=MAX_ATTRIBUTE_VALUE)] | I64 | float | bool


class Attrs(msgspec.Struct, array_like=True, tag=TAG_ATTRS, frozen=True, gc=False):
    """Attributes of invocation ``iid`` (protocol 5): key/value pairs describing the call, such
    as an OpenTelemetry span's (``tracer.otel.InvocationSpanProcessor``). Recorded after the
    invocation's Start, by whichever thread has them (a span may end on another thread: the
    repository joins by (puid, iid)); a later Attrs for the same iid adds keys, and a key given
    twice keeps its latest value."""

    iid: Id63
    attributes: Annotated[dict[Name, AttributeValue], msgspec.Meta(max_length=MAX_ATTRIBUTES)]


Event = Start | End | Error | Handoff | Attrs


class MethodInfo(msgspec.Struct, array_like=True, frozen=True):
    """Interned method metadata, sent once per process before events that use ``method``."""

    method: Id63
    module: Name
    qualname: Name
    file: Path
    line: Annotated[int, msgspec.Meta(ge=0, le=2**31)]


class ThreadInfo(msgspec.Struct, array_like=True, frozen=True):
    """Interned thread metadata: ``tid`` is the per-process serial; the rest is metadata."""

    tid: Id63
    native_id: I64
    name: Name


class ProcessInfo(msgspec.Struct, array_like=True, frozen=True):
    """The sending process. ``clock_offset_ns`` converts its monotonic event times to wall time.
    ``heartbeat_ms``: the process sends a batch at least this often while alive (0: it does not
    promise to), so a repository that hears nothing for several intervals knows it is gone."""

    pid: Annotated[int, msgspec.Meta(ge=0, le=2**31)]
    host: Name
    platform_id: Name
    clock_offset_ns: I64
    started_ns: I64
    argv: Annotated[list[Path], msgspec.Meta(max_length=MAX_ARGV)]
    heartbeat_ms: Annotated[int, msgspec.Meta(ge=0, le=3_600_000)] = 0


class FrameInfo(msgspec.Struct, array_like=True, frozen=True):
    """An interned code location, sent once per process before samples that use ``frame``: a
    function (its qualified name) in a file, starting at ``line``."""

    frame: Id63
    file: Path
    function: Name
    line: Annotated[int, msgspec.Meta(ge=0, le=2**31)]


#: The thread id of a sampler's gap (thread ids start at 1): a ``Sample`` of it, without frames,
#: says that from its ``t_ns``, for its ``duration_ns``, the sampler read no thread (a tick came
#: late: kept from the GIL, or off the CPU); its ``weight`` is the ticks missed, ``cpu_ns`` 0.
GAP_TID: Final = 0


class Sample(msgspec.Struct, array_like=True, frozen=True):
    """A stack of one thread, sampled at ``t_ns`` (the same monotonic clock as events).

    ``frames`` are frame ids from the outermost call to the innermost, ``lines`` the line each
    was executing. ``weight`` consecutive identical samples of an idle thread are collapsed into
    one: it stands for ``duration_ns`` from ``t_ns`` on. ``cpu_ns`` is the CPU time the thread used
    over that span (0: it was off-CPU: sleeping, waiting). Its ticks saw the stack at
    ``t_ns + first_tick_ns`` and ``t_ns + last_tick_ns`` (the same instant for one tick)."""

    tid: Id63
    t_ns: I64
    weight: Annotated[int, msgspec.Meta(ge=1, le=2**31)]
    duration_ns: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
    cpu_ns: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
    frames: Annotated[list[Id63], msgspec.Meta(max_length=MAX_STACK_DEPTH)]
    lines: Annotated[
        list[Annotated[int, msgspec.Meta(ge=0, le=2**31)]], msgspec.Meta(max_length=MAX_STACK_DEPTH)
    ]
    # When its first and last ticks saw the stack, as offsets from ``t_ns`` (None: not sent, by
    # a tracer that predates them, or a gap). Appended, optional: no new protocol version.
    first_tick_ns: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None
    last_tick_ns: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None


class SamplerReport(msgspec.Struct, array_like=True, frozen=True):
    """The sampler's own accounting, cumulative for the process: ticks taken, ticks that started
    later than one interval after the previous one, and the time the sampler itself spent.

    ``interval_ms`` is the configured interval; the sampler paces itself from there (its cost
    held near 1 %): ``current_interval_ns`` is the interval in effect when the report was
    made, so for the samples of its batch, and ``longest_interval_ns`` the longest it used so
    far. Both 0: a sender that predates pacing, which ticked at ``interval_ms`` throughout.
    ``dropped_samples``: finished samples the sampler refused while its queue to the sender was
    full (0 from a sender that predates it)."""

    mode: Annotated[str, msgspec.Meta(max_length=8)]
    interval_ms: Annotated[int, msgspec.Meta(ge=0, le=3_600_000)]
    ticks: Id63
    late_ticks: Id63
    cost_ns: Id63
    current_interval_ns: Id63 = 0
    longest_interval_ns: Id63 = 0
    dropped_samples: Id63 = 0


class LostWindow(msgspec.Struct, array_like=True, frozen=True):
    """From ``first_ns`` to ``last_ns`` (the process's monotonic clock, like events' ``t_ns``)
    the process dropped events of sequences it could not name in ``Batch.lost_seqs`` (past the
    bounds on the names it keeps): every sequence of the process that overlaps it is lossy."""

    first_ns: I64
    last_ns: I64


class ThreadChunk(msgspec.Struct, array_like=True, frozen=True):
    """The events of one thread, in the order the thread produced them."""

    tid: Id63
    events: Annotated[list[Event], msgspec.Meta(max_length=MAX_EVENTS_PER_CHUNK)]


class Batch(msgspec.Struct, array_like=True, frozen=True):
    """One message from a traced process: numbered per process, idempotent by (puid, batch_no).

    ``dropped`` is the process's cumulative count of events it could not send; ``final`` marks the
    last batch of a process that shut down cleanly (its open invocations will never end).
    ``frames``, ``samples`` and ``sampler`` carry the stack sampler's output (protocol 3).
    ``lost_seqs`` names sequences some of whose events this process had to drop (protocol 4);
    ``lost_windows`` are the times of drops whose sequences it could not name (appended,
    optional: a repository that predates them ignores them)."""

    puid: Id63
    batch_no: Id63
    process: ProcessInfo
    methods: Annotated[list[MethodInfo], msgspec.Meta(max_length=MAX_INFOS_PER_BATCH)]
    threads: Annotated[list[ThreadInfo], msgspec.Meta(max_length=MAX_INFOS_PER_BATCH)]
    chunks: Annotated[list[ThreadChunk], msgspec.Meta(max_length=MAX_CHUNKS_PER_BATCH)]
    dropped: Id63 = 0
    final: bool = False
    frames: Annotated[list[FrameInfo], msgspec.Meta(max_length=MAX_INFOS_PER_BATCH)] = []
    samples: Annotated[list[Sample], msgspec.Meta(max_length=MAX_SAMPLES_PER_BATCH)] = []
    sampler: SamplerReport | None = None
    lost_seqs: Annotated[list[SeqId], msgspec.Meta(max_length=MAX_LOST_SEQS)] = []
    lost_windows: Annotated[list[LostWindow], msgspec.Meta(max_length=MAX_LOST_WINDOWS)] = []


class Ack(msgspec.Struct, array_like=True, frozen=True):
    """The repository stored (or had already stored) batch ``batch_no`` of process ``puid``."""

    puid: Id63
    batch_no: Id63


def process_layout(
    *,
    pid: int,
    host: str,
    platform_id: str,
    clock_offset_ns: int,
    started_ns: int,
    argv: Sequence[str],
    heartbeat_ms: int,
) -> tuple[Any, ...]:
    """A ``ProcessInfo`` as the sender encodes it: a plain tuple in the struct's field order."""
    return (pid, host, platform_id, clock_offset_ns, started_ns, argv, heartbeat_ms)


def batch_layout(
    *,
    puid: int,
    batch_no: int,
    process: tuple[Any, ...],
    methods: Sequence[Any],
    threads: Sequence[Any],
    chunks: Sequence[Any],
    dropped: int = 0,
    final: bool = False,
    frames: Sequence[Any] = (),
    samples: Sequence[Any] = (),
    sampler: tuple[Any, ...] | None = None,
    lost_seqs: Sequence[bytes] = (),
    lost_windows: Sequence[tuple[int, int]] = (),
) -> tuple[Any, ...]:
    """A ``Batch`` as the sender encodes it. The hot path hands over its events as tuples, so
    the sender encodes tuples rather than building structs; this lays them out in ``Batch``'s
    field order, by name (``tests/tracer/test_wire.py`` decodes it as a ``Batch``)."""
    return (
        puid,
        batch_no,
        process,
        methods,
        threads,
        chunks,
        dropped,
        final,
        frames,
        samples,
        sampler,
        lost_seqs,
        lost_windows,
    )


def event_count(batch: Batch) -> int:
    return sum(len(chunk.events) for chunk in batch.chunks)

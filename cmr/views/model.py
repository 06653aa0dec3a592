"""The call tree the views share: nodes, their process, thread and hand-off, and the tree.

``cmr.views.tree.calltree`` builds it from a store's records; the processors, the sample merge and
every renderer read it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, Self, TypeAlias, TypeVar

import msgspec

from cmr.store.base import PROCESS_ALIVE, MethodRecord, ProcessState, shown_status

#: How a call ended, or that it has not: still running, or never will (its process ended or
#: was lost first).
Status: TypeAlias = Literal["ok", "error", "running", "incomplete"]
STATUS_OK: Final = "ok"
STATUS_ERROR: Final = "error"
STATUS_RUNNING: Final = "running"
STATUS_INCOMPLETE: Final = "incomplete"

#: A sequence's state, its root's: running, never to end (its process ended or was lost), or
#: ended (detached work beneath it may still run).
TreeStatus: TypeAlias = Literal["running", "incomplete", "complete"]
TREE_COMPLETE: Final = "complete"

#: Node kinds: timed by the tracer at the call itself, made up to hold orphans together, or
#: inferred from stack samples (``cmr.views.samples.merge``).
Kind: TypeAlias = Literal["measured", "synthetic", "estimated"]
KIND_MEASURED: Final = "measured"
KIND_SYNTHETIC: Final = "synthetic"
KIND_ESTIMATED: Final = "estimated"

UNKNOWN_ROOT = "<unknown root>"
UNKNOWN_THREAD = "<unknown thread>"
UNKNOWN_HOST = "<unknown host>"

#: The hand-off kind of an invocation that continues one no process here recorded.
HANDOFF_REMOTE = "remote"


@dataclass(frozen=True, slots=True)
class ProcessRef:
    """Where a node ran, and whether that process was still alive when the tree was built
    (``state``: alive, ended or lost; ``last_seen_ns``: its latest batch, 0 when unknown)."""

    puid: int
    pid: int
    host: str
    state: ProcessState = PROCESS_ALIVE
    last_seen_ns: int = 0


@dataclass(frozen=True, slots=True)
class ThreadRef:
    tid: int
    name: str


@dataclass(frozen=True, slots=True)
class Handoff:
    """How a node was reached from its caller's thread: ``kind`` of hop, when the work was
    submitted, and how long it waited before this invocation started (0 when clocks disagree).
    Both times are None for a remote parent that was never recorded here."""

    hid: int
    kind: str  # thread | task | process | remote
    submitted_ns: int | None
    queued_ns: int | None


class Bounds(msgspec.Struct, frozen=True, gc=False):
    """Where an estimated node can have started and ended, from the ticks around it: it had
    started by the first tick that saw it (``start_max_ns``) and not before the tick of its
    measured caller before that one (``start_min_ns``, or the caller's start); it ran until the
    last tick that saw it (``end_min_ns``) and ended by the caller's next tick (``end_max_ns``,
    or the caller's end; None when neither is known yet). Always ordered: start_min <=
    start_max <= end_min <= end_max (``views.samples.placement.bounds_of``)."""

    start_min_ns: int
    start_max_ns: int
    end_min_ns: int
    end_max_ns: int | None

    def spread_ns(self) -> int | None:
        """Half the width of the two windows: the ± of the node's extent (None: unbounded)."""
        if self.end_max_ns is None:
            return None
        return (self.start_max_ns - self.start_min_ns + self.end_max_ns - self.end_min_ns) // 2


class Node(msgspec.Struct, eq=False, gc=False):
    """One invocation in the tree. Identity comparison only: two calls are never "equal".

    A msgspec Struct: a tree of a million calls makes a million of these, at a third of a slotted
    dataclass's cost each; not tracked by the garbage collector, as a tree has no cycles (a node
    holds its children, never its parent)."""

    name: str
    start_ns: int
    end_ns: int | None
    duration_ns: int | None
    self_ns: int | None  # duration minus the children's, floored at 0; None while unknown
    process: ProcessRef
    thread: ThreadRef
    status: Status
    error: str | None  # exception type name when the call raised
    iid: int = 0
    kind: Kind = KIND_MEASURED
    handoff: Handoff | None = None
    children: list[Node] = msgspec.field(default_factory=list)
    hidden: int = 0  # descendants a view left out beneath this node
    # Sampling (estimated nodes always have them; measured ones once samples are merged in):
    samples: int = 0  # sample weight in this node's subtree, its own included
    self_samples: int = 0  # sample weight whose innermost frame is this node
    cpu_ns: int | None = None  # CPU time estimated from the samples; None without samples
    frame: tuple[str, str, int] | None = None  # an estimated node's (file, function, line)
    bounds: Bounds | None = None  # an estimated node's (``Bounds``); None for the others
    # Key/value pairs recorded for the invocation (wire.Attrs: an OpenTelemetry span's), or None.
    attributes: dict[str, str | int | float | bool] | None = None
    # Hand-offs to untraced code that ran nothing traced, left out beneath it (``views.tree.hops``).
    folded: int = 0
    # Outlived its caller: open when the caller ended, or ending after it (``calltree.outlives``).
    detached: bool = False


@dataclass(frozen=True, slots=True)
class SequenceTree:
    seq: bytes
    status: TreeStatus
    root: Node
    invocations: int  # distinct invocations in the data, before any view hides some
    threads: int
    processes: int
    hidden: int = 0  # nodes hidden by views, in total
    samples_skipped: int = 0  # sample weight merge_samples could not place (no frame matched)
    # Sample weight that showed the event loop between steps of interleaved asyncio tasks, none
    # of them (placed under the call running the loop: ``placement._place_below_caller``).
    samples_between_tasks: int = 0
    # Of those, the CPU time of the ones that showed the event loop itself, and the weight of
    # the ones whose thread was mostly on the CPU meanwhile; and the weight of all placed
    # samples: a busy thread whose stack shows the loop waiting was read where it gave up the
    # GIL (``render.notes``).
    loop_busy_ns: int = 0
    loop_busy_samples: int = 0
    samples_placed: int = 0
    # Of the sequence's time, how long the sampler of one of its processes read no thread (it
    # was kept from the GIL, or off the CPU): what ran then has no samples (``merge.unsampled``).
    unsampled_ns: int = 0
    # Processes that reported dropping events of this sequence, by host, pid and puid.
    dropped_by: tuple[ProcessRef, ...] = ()
    # Of those, the ones known by a time window: (puid, first_ns, last_ns), wall clock, when
    # the process dropped events of sequences it could not name, which this one overlaps.
    dropped_in_window: tuple[tuple[int, int, int], ...] = ()

    @property
    def lossy(self) -> bool:
        """Some events never arrived because their process dropped them: calls may be missing."""
        return bool(self.dropped_by)

    @property
    def shown_status(self) -> str:
        """The status word a listing shows for this sequence (``store.base.shown_status``):
        ``error`` for a complete sequence whose root call raised, else ``status``."""
        root = self.root
        return shown_status(self.status, root.error if root.status == STATUS_ERROR else None)


class Branching(Protocol):
    """A tree's node: a call (``Node``), a profile's line (``ProfileNode``)."""

    @property
    def children(self) -> Sequence[Self]: ...


TreeNode = TypeVar("TreeNode", bound=Branching)


def walk(root: TreeNode) -> Iterator[tuple[TreeNode, int]]:
    """Every node with its depth (root = 0), parents before children, children in order."""
    stack: list[tuple[TreeNode, int]] = [(root, 0)]
    pop, extend = stack.pop, stack.extend
    while stack:
        node, depth = pop()
        yield node, depth
        children = node.children
        if children:  # most nodes are leaves: no list for them
            below = depth + 1
            extend([(child, below) for child in reversed(children)])


def method_name(methods: dict[tuple[int, int], MethodRecord], puid: int, method: int) -> str:
    info = methods.get((puid, method))
    if info is None:
        return f"<unknown method {method}>"
    return f"{info.module}.{info.qualname}" if info.module else info.qualname


def service_name(argv: tuple[str, ...]) -> str:
    """What a process calls itself: its script or module name (``shop/app.py`` → ``app``,
    ``shop/__main__.py`` → ``shop``, ``-m shop.app`` as ``tracer run`` names a module →
    ``shop.app``), else ``python`` for ``-c`` code or a bare interpreter."""
    if len(argv) > 1 and argv[0] == "-m" and argv[1]:
        return argv[1]
    first = argv[0] if argv else ""
    base = os.path.basename(first.rstrip("/"))
    stem = base[:-3] if base.endswith(".py") else base
    if stem == "__main__":
        stem = os.path.basename(os.path.dirname(first)) or stem
    return "python" if stem in ("", "-c", "-m", "-") else stem

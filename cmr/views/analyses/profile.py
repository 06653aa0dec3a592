"""Profiles: merged call trees folded into one stack tree, the way pyinstrument shows a profile.

Nodes merge where they have the same signature under the same parent: measured calls by name,
estimated frames by (function, file, line) — the line is the function's first line, or the line
being executed when the trees were merged with ``lines`` (``merge_samples``), so a profile keys
frames the way its trees were merged. Each profile node adds up the calls it stands for: their
count, sample weight (total and self), time (total and self) and CPU time. The functions here are
pure; ``cmr profile`` loads the trees and hands them over.

- ``profile_sequence``: one sequence, from its root down (repeated calls merge: a loop calling
  ``price`` 100 times is one ``price`` node with 100 calls).
- ``method_subtrees`` + ``build_profile``: the invocations of one method across many sequences,
  each profiled from that invocation down (nested invocations of it are part of the outer one).
- ``by_thread``: one root per thread instead, holding what ran on that thread (a call handed off
  to another thread moves to that thread's root); a root's numbers are its children's sums.

A call without a duration yet (running, or incomplete) counts the time its children account for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from cmr.store.base import SequenceData, names_method
from cmr.views.model import KIND_MEASURED, KIND_SYNTHETIC, Node, SequenceTree

KIND_THREAD = "thread"

Signature = tuple[str, str, tuple[str, str, int] | None]


@dataclass(frozen=True, slots=True)
class ThreadOrigin:
    """The thread a ``by_thread`` root stands for."""

    host: str
    pid: int
    puid: int
    tid: int
    name: str


class ProfileNode(msgspec.Struct, eq=False, gc=False):
    """One line of a profile: the calls merged into it. A Struct, as ``Node`` is: a profile of
    a big tree has as many lines as the tree has distinct paths."""

    name: str
    kind: str  # measured | estimated | synthetic | thread
    frame: tuple[str, str, int] | None = None  # an estimated frame's (file, function, line)
    calls: int = 0  # tree nodes merged into this one
    samples: int = 0
    self_samples: int = 0
    time_ns: int = 0
    self_ns: int = 0
    cpu_ns: int | None = None  # None: no sample fell here
    thread: ThreadOrigin | None = None  # on by_thread roots
    children: list[ProfileNode] = msgspec.field(default_factory=list)

    @property
    def off_cpu_ns(self) -> int | None:
        """Time the samples say was spent off the CPU (waiting, sleeping), floored at 0."""
        return None if self.cpu_ns is None else max(0, self.time_ns - self.cpu_ns)


@dataclass(frozen=True, slots=True)
class Profile:
    roots: list[ProfileNode]  # by time, longest first
    sequences: int
    samples_skipped: int
    by_thread: bool = False


def profile_sequence(tree: SequenceTree, *, by_thread: bool = False) -> Profile:
    """The stack tree of one (merged) sequence tree."""
    return build_profile(
        [tree.root], sequences=1, skipped=tree.samples_skipped, by_thread=by_thread
    )


def method_subtrees(tree: SequenceTree, data: SequenceData, method: str) -> list[Node]:
    """The outermost invocations of ``method`` (``module.qualname``, or the bare qualname) in the
    tree that ``data`` built."""
    records = {(r.puid, r.iid): data.methods.get((r.puid, r.method)) for r in data.invocations}
    found: list[Node] = []
    stack = [tree.root]
    while stack:
        node = stack.pop()
        record = records.get((node.process.puid, node.iid)) if node.kind == KIND_MEASURED else None
        if record is not None and names_method(record.module, record.qualname, method):
            found.append(node)
        else:
            stack.extend(reversed(node.children))
    return found


def build_profile(
    subtrees: Iterable[Node], *, sequences: int, skipped: int, by_thread: bool = False
) -> Profile:
    """Fold ``subtrees`` into one stack tree (or one per thread)."""
    top = ProfileNode("", KIND_SYNTHETIC)
    threads: dict[tuple[int, int], ProfileNode] = {}
    children_of = _Children()
    for subtree in subtrees:
        known = _known_times(subtree)
        if not by_thread:
            _fold(subtree, top, known, children_of, same_thread=False)
            continue
        for piece in _thread_pieces(subtree):
            key = (piece.process.puid, piece.thread.tid)
            root = threads.get(key)
            if root is None:
                root = threads[key] = _thread_root(piece)
            _fold(piece, root, known, children_of, same_thread=True)
    roots = list(threads.values()) if by_thread else top.children
    for root in roots:
        if root.kind == KIND_THREAD:
            _sum_children(root)
        sort_profile(root)
    roots.sort(key=_longest_first)
    return Profile(roots, sequences, skipped, by_thread)


def _known_times(root: Node) -> dict[int, int]:
    """The time of each node without a duration yet (running, or incomplete): what its children
    account for. Found a level at a time; most trees have none."""
    open_nodes: list[Node] = []
    level = [root]
    while level:
        open_nodes += [node for node in level if node.duration_ns is None]
        level = [child for node in level for child in node.children]
    known: dict[int, int] = {}
    for node in reversed(open_nodes):  # deeper levels first: an open child is known already
        known[id(node)] = sum(
            known[id(child)] if child.duration_ns is None else child.duration_ns
            for child in node.children
        )
    return known


def _fold(
    source: Node,
    parent: ProfileNode,
    known: dict[int, int],
    children_of: _Children,
    *,
    same_thread: bool,
) -> None:
    """Add ``source`` and its subtree under ``parent``; ``same_thread``: leave out children that
    ran on another thread (and their samples, which ``source``'s totals include). A level of the
    tree at a time, each node's children beside their profile node in a parallel list."""
    nodes, targets = [source], [parent]
    indexes = children_of.indexes
    while nodes:
        next_nodes: list[Node] = []
        next_targets: list[ProfileNode] = []
        for node, into in zip(nodes, targets, strict=True):
            children = node.children
            samples, cpu = node.samples, node.cpu_ns
            if same_thread:
                children = [c for c in children if _same_thread(c, node)]
                for other in node.children:
                    if not _same_thread(other, node):
                        samples -= other.samples
                        if cpu is not None and other.cpu_ns is not None:
                            cpu -= other.cpu_ns
                if not samples and all(child.cpu_ns is None for child in children):
                    cpu = None  # every sample below it fell on other threads
            # children_of.get(into, node), inline: this runs once per call of the tree
            by_key = indexes.get(id(into))
            if by_key is None:
                by_key = indexes[id(into)] = {}
            key = node.name if node.kind == KIND_MEASURED else (node.kind, node.name, node.frame)
            target = by_key.get(key)
            if target is None:
                target = by_key[key] = ProfileNode(node.name, node.kind, node.frame)
                into.children.append(target)
            target.calls += 1
            target.samples += samples
            target.self_samples += node.self_samples
            duration = node.duration_ns
            target.time_ns += duration if duration is not None else known[id(node)]
            target.self_ns += node.self_ns or 0
            if cpu is not None:
                target.cpu_ns = (target.cpu_ns or 0) + cpu
            if children:
                next_nodes += children
                next_targets += [target] * len(children)
        nodes, targets = next_nodes, next_targets


class Grafts:
    """Estimated subtrees folded under the lines of a profile made without them
    (``bigsamples``), merged where their signatures meet as ``build_profile`` merges them."""

    def __init__(self) -> None:
        self._children = _Children()
        self._lines: dict[int, ProfileNode] = {}

    def add(self, line: ProfileNode, nodes: Iterable[Node]) -> None:
        """Fold ``nodes`` (estimated, each with its subtree) under ``line``."""
        for node in nodes:
            _fold(node, line, {}, self._children, same_thread=False)
            self._lines[id(line)] = line

    def sort(self) -> None:
        """The lines that took subtrees, and those subtrees, in ``sort_profile``'s order."""
        for line in self._lines.values():
            line.children.sort(key=_longest_first)
            for child in line.children:
                if child.kind != KIND_MEASURED:
                    sort_profile(child)


def _same_thread(child: Node, parent: Node) -> bool:
    return child.process.puid == parent.process.puid and child.thread.tid == parent.thread.tid


class _Children:
    """Each profile node's children by signature, while profiles are folded."""

    def __init__(self) -> None:
        self.indexes: dict[int, dict[str | Signature, ProfileNode]] = {}  # id(parent) -> ...

    def get(self, parent: ProfileNode, node: Node) -> ProfileNode:
        index = self.indexes.get(id(parent))
        if index is None:
            index = self.indexes[id(parent)] = {}
        # A measured call is known by its name (it has no frame): no tuple per node.
        key = node.name if node.kind == KIND_MEASURED else (node.kind, node.name, node.frame)
        child = index.get(key)
        if child is None:
            child = index[key] = ProfileNode(node.name, node.kind, node.frame)
            parent.children.append(child)
        return child


def _thread_pieces(root: Node) -> list[Node]:
    """The nodes that start a thread's share of the subtree: the root (unless synthetic) and
    every node on another thread than its parent (a synthetic root's children count as such)."""
    pieces: list[Node] = []
    stack: list[tuple[Node, Node | None]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        if node.kind != KIND_SYNTHETIC and (
            parent is None or parent.kind == KIND_SYNTHETIC or not _same_thread(node, parent)
        ):
            pieces.append(node)
        stack.extend((child, node) for child in reversed(node.children))
    return pieces


def _thread_root(node: Node) -> ProfileNode:
    process, thread = node.process, node.thread
    origin = ThreadOrigin(process.host, process.pid, process.puid, thread.tid, thread.name)
    name = f"{thread.name} ({thread.tid}) {process.host}:{process.pid}"
    return ProfileNode(name, KIND_THREAD, thread=origin)


def _sum_children(root: ProfileNode) -> None:
    root.calls = sum(child.calls for child in root.children)
    root.samples = sum(child.samples for child in root.children)
    root.time_ns = sum(child.time_ns for child in root.children)
    cpu = [child.cpu_ns for child in root.children if child.cpu_ns is not None]
    root.cpu_ns = sum(cpu) if cpu else None


def sort_profile(root: ProfileNode) -> None:
    """Every line's children, longest first (then by name and frame: a total order)."""
    level = [root]
    while level:  # a level at a time; a line with fewer than two children has nothing to sort
        for node in level:
            if len(node.children) > 1:
                node.children.sort(key=_longest_first)
        level = [child for node in level for child in node.children]


def _longest_first(node: ProfileNode) -> tuple[int, str, tuple[str, str, int]]:
    return (-node.time_ns, node.name, node.frame or ("", "", 0))

"""Lay a call tree out on timelines: one track per thread, so timeline viewers can draw it.

Speedscope's evented profiles and Chrome trace slices both need the calls of one timeline to
nest properly: a call opens and closes inside the call that encloses it. On one thread that holds
for plain synchronous code, but not always: asyncio tasks interleave their calls on one thread, and
a generator may end after its caller did. Such a call goes to an extra track of the same thread
rather than being cut or moved, so every call keeps its true start and end. A call nests only
under a call that is its ancestor in the tree: a call of another task that happens to enclose it
in time is not its caller.

A call that has not ended (running, or incomplete) lasts until the latest time the tree shows,
the same bound ``cmr show --threads`` uses, unless its caller on the same thread ended earlier.
Synthetic roots ran on no thread and get no track.

An estimated call (merged from samples) has no true start and end: its samples are spread over a
window, interleaved with those of its siblings, while its estimated duration is usually shorter.
A timeline shows it as one block of its estimated duration, inside its caller, starting at its
window's start or after its earlier estimated siblings, and moved past the measured calls of its
caller on the same thread (those hold their own samples); cut short where there is no room.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from cmr.views.model import (
    KIND_ESTIMATED,
    KIND_SYNTHETIC,
    Node,
    ProcessRef,
    SequenceTree,
    ThreadRef,
    walk,
)


class Slice(msgspec.Struct, frozen=True, gc=False):
    """A call on a track, with an end even when the call has none yet (then ``open`` is True).
    Structs, not dataclasses, here and below: a layout makes one per call and two events."""

    node: Node
    start_ns: int
    end_ns: int
    open: bool


class TrackEvent(msgspec.Struct, frozen=True, gc=False):
    """A slice opening (``opening``) or closing at ``at_ns``; a track's events nest and their
    times never decrease."""

    opening: bool
    at_ns: int
    slice: Slice


@dataclass(slots=True)
class Track:
    """One timeline of a thread: ``index`` 0 holds its calls that nest, higher indexes the calls
    that overlap them without being their callees."""

    process: ProcessRef
    thread: ThreadRef
    index: int
    slices: list[Slice] = field(default_factory=list)  # in the order they open
    events: list[TrackEvent] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Layout:
    """Every track, ordered by thread (in order of first activity) then index; times span
    ``start_ns`` (the earliest call) to ``end_ns`` (the latest time the tree shows)."""

    tracks: list[Track]
    start_ns: int
    end_ns: int
    track_of: dict[int, Track]  # id(node) -> its track
    parent_of: dict[int, Node]  # id(node) -> its caller in the tree (absent for the root)


class _Open(msgspec.Struct, gc=False):
    slice: Slice
    first: int  # preorder number of the node
    last: int  # largest preorder number in its subtree


def extent(tree: SequenceTree) -> tuple[int, int] | None:
    """The earliest start and the latest time (end, or start while open) of the tree's calls;
    None when it has none but a synthetic root."""
    nodes = [node for node, _ in walk(tree.root) if node.kind != KIND_SYNTHETIC]
    if not nodes:
        return None
    starts = [node.start_ns for node in nodes]
    ends = [node.end_ns for node in nodes if node.end_ns is not None]
    return min(starts), max(starts + ends)


def lay_out(tree: SequenceTree) -> Layout:
    """Place every call of ``tree`` on a track of its thread."""
    span = extent(tree)
    if span is None:
        return Layout([], 0, 0, {}, {})
    start, end = span
    order, last, parent_of = _number(tree.root)
    windows = _windows(order, end)
    lanes: dict[tuple[int, int], list[tuple[Slice, int]]] = {}
    for first, node in enumerate(order):
        if node.kind == KIND_SYNTHETIC:
            continue
        window_start, window_end = windows[id(node)]
        piece = Slice(node, window_start, window_end, node.end_ns is None)
        lanes.setdefault((node.process.puid, node.thread.tid), []).append((piece, first))
    tracks: list[Track] = []
    track_of: dict[int, Track] = {}
    lane_order = sorted(lanes.values(), key=lambda s: (min(p.start_ns for p, _ in s), s[0][1]))
    for pieces in lane_order:
        for track in _lane_tracks(pieces, last):
            tracks.append(track)
            for piece in track.slices:
                track_of[id(piece.node)] = track
    return Layout(tracks, start, end, track_of, parent_of)


def _windows(order: list[Node], end: int) -> dict[int, tuple[int, int]]:
    """id(node) -> where its slice goes: a measured call's own start and end, an estimated
    call's block (see the module's docstring). A call still open lasts until ``end``, or until its
    caller on the same thread ended: its own end was lost, and a call cannot outlive its caller
    on one thread. Callers come before their callees in ``order``, so a caller's window is known
    when its callees are placed."""
    windows: dict[int, tuple[int, int]] = {}
    for node in order:
        if id(node) not in windows:  # the root: no caller placed it
            windows[id(node)] = _own_window(node, end)
        window = windows[id(node)]
        thread = (node.process.puid, node.thread.tid)
        estimated: list[Node] = []
        for child in node.children:
            if child.kind == KIND_ESTIMATED:
                estimated.append(child)
                continue
            start, stop = _own_window(child, end)
            if child.end_ns is None and (child.process.puid, child.thread.tid) == thread:
                stop = max(start, min(stop, window[1]))
            windows[id(child)] = (start, stop)
        if estimated:
            _pack(node, estimated, window, windows)
    return windows


def _own_window(node: Node, end: int) -> tuple[int, int]:
    return node.start_ns, end if node.end_ns is None else max(node.start_ns, node.end_ns)


def _pack(
    caller: Node,
    estimated: list[Node],
    window: tuple[int, int],
    windows: dict[int, tuple[int, int]],
) -> None:
    lower, upper = window
    same_thread = (caller.process.puid, caller.thread.tid)
    obstacles = sorted(
        (child.start_ns, upper if child.end_ns is None else max(child.start_ns, child.end_ns))
        for child in caller.children
        if child.kind != KIND_ESTIMATED and (child.process.puid, child.thread.tid) == same_thread
    )
    cursor = lower
    for child in sorted(estimated, key=lambda c: c.start_ns):
        start = min(max(child.start_ns, cursor), upper)
        for obstacle_start, obstacle_end in obstacles:  # obstacles are few: measured siblings
            if obstacle_start <= start < obstacle_end:
                start = min(obstacle_end, upper)
        stop = min(start + _estimate(child), upper)
        for obstacle_start, _obstacle_end in obstacles:
            if start < obstacle_start < stop:
                stop = obstacle_start
        windows[id(child)] = (start, stop)
        cursor = stop


def _estimate(node: Node) -> int:
    if node.duration_ns is not None:
        return max(0, node.duration_ns)
    return 0 if node.end_ns is None else max(0, node.end_ns - node.start_ns)


def _number(root: Node) -> tuple[list[Node], list[int], dict[int, Node]]:
    """Nodes in preorder, the last preorder number inside each node's subtree (so ``a`` is an
    ancestor of ``b`` when first(a) < first(b) <= last(a)), and each node's caller."""
    order: list[Node] = []
    depths: list[int] = []
    parent_of: dict[int, Node] = {}
    for node, depth in walk(root):
        order.append(node)
        depths.append(depth)
        for child in node.children:
            parent_of[id(child)] = node
    last = list(range(len(order)))
    path: list[int] = []  # preorder numbers of the nodes whose subtrees are still open
    for index, depth in enumerate(depths):
        while len(path) > depth:  # a node at this depth closes the subtrees at it and below
            last[path.pop()] = index - 1
        path.append(index)
    for index in path:
        last[index] = len(order) - 1
    return order, last, parent_of


def _lane_tracks(pieces: list[tuple[Slice, int]], last: list[int]) -> list[Track]:
    """Calls in start order (longer first, callers before callees on ties). Each goes on the
    track whose innermost open call, once the calls that ended before it are closed, is its
    nearest ancestor and lasts at least as long; failing that on an empty track, else a new one."""
    pieces.sort(key=lambda item: (item[0].start_ns, -item[0].end_ns, item[1]))
    process, thread = pieces[0][0].node.process, pieces[0][0].node.thread
    tracks: list[Track] = []
    stacks: list[list[_Open]] = []
    for piece, first in pieces:
        best: int | None = None  # the track whose top is the nearest enclosing ancestor
        empty: int | None = None
        for number, (track, stack) in enumerate(zip(tracks, stacks, strict=True)):
            _close_ended(track, stack, piece.start_ns, first)
            if not stack:
                empty = number if empty is None else empty
                continue
            top = stack[-1]
            encloses = top.first < first <= top.last and top.slice.end_ns >= piece.end_ns
            if encloses and (best is None or top.first > stacks[best][-1].first):
                best = number
        chosen = best if best is not None else empty
        if chosen is None:
            chosen = len(tracks)
            tracks.append(Track(process, thread, chosen))
            stacks.append([])
        _open(tracks[chosen], stacks[chosen], piece, first, last[first])
    for track, stack in zip(tracks, stacks, strict=True):
        while stack:
            closing = stack.pop().slice
            track.events.append(TrackEvent(False, closing.end_ns, closing))
    return tracks


def _close_ended(track: Track, stack: list[_Open], start_ns: int, first: int) -> None:
    """Close the calls that ended before ``start_ns`` (or at it, unless they are the ancestors
    of the call about to open: a zero-length call at its caller's very end stays inside it)."""
    while stack:
        top = stack[-1]
        ended = top.slice.end_ns < start_ns or (
            top.slice.end_ns == start_ns and not top.first < first <= top.last
        )
        if not ended:
            return
        stack.pop()
        track.events.append(TrackEvent(False, top.slice.end_ns, top.slice))


def _open(track: Track, stack: list[_Open], piece: Slice, first: int, last: int) -> None:
    stack.append(_Open(piece, first, last))
    track.slices.append(piece)
    track.events.append(TrackEvent(True, piece.start_ns, piece))

"""The model an HTML report draws: one sequence as plain JSON-able data, laid out for a canvas.

``build_model(data)`` reuses the views — ``build_tree`` and ``merge_samples`` (as the exports
do: samples are merged in when the sequence has some), ``lay_out`` for the tracks of each
thread and the end of calls still open, ``profile_sequence`` for the flame graph — so the report
shows what ``cmr show`` and the exports show. The page (``cmr.report.page``) and ``cmr ui``
serve this same dict, the latter as JSON to a page that refreshes a running sequence. Its types
are ``cmr.report.schema``'s.

Times are nanoseconds from ``summary.origin_ns`` (the earliest call), since a browser's numbers
hold absolute nanoseconds only to about 256 ns; ``origin_ns`` is also given as a decimal string.
Ids are hex strings for the same reason. Bars and flame nodes are columns (one list per field,
index = bar) rather than one object per bar: a 100,000-call sequence stays a few megabytes, and
the page turns each column into a typed array at once.

- ``summary``: ``seq``, ``root``, ``status`` (running | complete | incomplete), ``origin_ns``,
  ``origin``, ``end_ns`` (the latest time the sequence shows, relative), ``invocations``,
  ``threads``, ``processes``, ``lossy``, ``samples_skipped``.
- ``lanes``: one per thread, grouped by process (processes and their threads in order of first
  activity): ``process`` (``host:pid``), ``host``, ``pid``, ``puid``, ``thread``, ``tid``,
  ``state`` (alive | ended | lost), ``rows``. A sequence whose root is made up (``<remote
  parent>``, ``<unknown root>``) gets a first lane of its own for it, with ``puid`` None.
- ``bars``: every node of the tree, measured, estimated (from samples) and synthetic, in preorder
  (bar 0 is the root, a caller comes before its callees). Columns: ``name`` (index into
  ``names``), ``kind`` and ``status`` (indexes into ``kinds`` and ``statuses``), ``lane``,
  ``row`` (nesting level in the lane: calls that overlap on one thread without nesting go below),
  ``depth`` (in the tree), ``parent`` (-1 for the root), ``start``, ``end`` (a call still open
  ends at the latest time the sequence shows, or at its caller's end on the same thread),
  ``open``, ``self`` (None while unknown), ``error``, ``iid`` (hex; None but for measured calls),
  ``handoff`` (the hop's kind, or None), ``detached`` (it outlived its caller), ``samples``,
  ``cpu`` (None without samples), ``frame`` (``[file, function, line]`` of an estimated
  frame), ``bounds`` (an estimated bar's ``[start min, start max, end min, end max]``,
  ``Node.bounds`` made relative; end max None while unbounded; drawn as whiskers) and
  ``attributes``.
- ``arrows``: one per hand-off whose submitter and submit time are known: ``from`` and ``to``
  (bar indexes), ``kind``, ``submitted``, ``start`` and ``queued`` (the wait, ns).
- ``critical``: the bars of the critical path (``cmr.views.analyses.critical``, what ``cmr show
  --critical-path`` shows), in its order: the root first, then depth first in time order.
- ``flame``: the sequence's profile (calls and estimated frames merged where the same function
  sits at the same place), columns ``name``, ``kind``, ``parent``, ``depth``, ``value`` (what a
  frame's width stands for: ``weight`` is ``samples`` when the sequence has samples, else
  ``time`` in ns), ``time``, ``self``, ``samples``, ``calls``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Final, NamedTuple, TypeVar

from cmr.gc_paused import paused_gc
from cmr.report.schema import Arrow, Bars, Flame, Lane, ReportModel, Summary
from cmr.store.base import SequenceData
from cmr.views.analyses.critical import critical_path
from cmr.views.analyses.lanes import Layout, Track, lay_out
from cmr.views.analyses.profile import ProfileNode, profile_sequence
from cmr.views.model import KIND_ESTIMATED, KIND_MEASURED, KIND_SYNTHETIC, Bounds, Node
from cmr.views.pipeline import sequence_tree  # the exports' tree: samples merged in
from cmr.views.render.folded import has_samples
from cmr.views.render.interned import Interned

#: Version of the model's shape: the page refuses a model it does not know.
MODEL_VERSION: Final = 1
KINDS: Final = (KIND_MEASURED, KIND_ESTIMATED, KIND_SYNTHETIC)
STATUSES: Final = ("ok", "error", "running", "incomplete")
WEIGHT_SAMPLES: Final = "samples"
WEIGHT_TIME: Final = "time"

Attributes = dict[str, str | int | float | bool]


#: How far building a model has gone after each step, in percent of its time (measured on a
#: sequence of 100,000 calls with samples: the tree and its samples take about half, laying out
#: the timelines a fifth): what ``cmr report``'s progress estimates the time left by.
DONE_AFTER_TREE: Final = 55
DONE_AFTER_LAYOUT: Final = 78
DONE_AFTER_BARS: Final = 88
DONE_AFTER_CRITICAL: Final = 94


def build_model(data: SequenceData, on_step: Callable[[int], object] | None = None) -> ReportModel:
    """The report model of one sequence (see the module's docstring); ``on_step`` is told the
    percent of the work done after each step (``DONE_AFTER_TREE`` …, then 100). The garbage
    collector waits meanwhile: a big tree is many objects that all stay alive, scanned for
    nothing."""
    with paused_gc():
        return _build_model(data, on_step or _ignored)


def _ignored(_done: int) -> None:
    pass


def _build_model(data: SequenceData, on_step: Callable[[int], object]) -> ReportModel:
    tree = sequence_tree(data)
    on_step(DONE_AFTER_TREE)
    layout = lay_out(tree)
    on_step(DONE_AFTER_LAYOUT)
    nodes, depths, parents = _preorder([tree.root])
    origin = layout.start_ns if layout.tracks else _first_start(nodes)
    end = max(layout.end_ns, origin)
    names = Interned()
    lanes, lane_of, row_of = _lanes(layout, tree.root)
    bars = _bars(
        _Tree(nodes, depths, parents),
        layout,
        lane_of,
        row_of,
        origin=origin,
        end=end,
        names=names,
        attributes=_attributes(data),
    )
    arrows = _arrows(nodes, parents, origin)
    on_step(DONE_AFTER_BARS)
    critical = _critical(tree.root, nodes)
    on_step(DONE_AFTER_CRITICAL)
    summary: Summary = {
        "seq": tree.seq.hex(),
        "root": tree.root.name,
        "status": tree.shown_status,
        "origin_ns": origin,
        "origin": str(origin),
        "origin_iso": _iso(origin),
        "end_ns": end - origin,
        "invocations": tree.invocations,
        "threads": tree.threads,
        "processes": tree.processes,
        "lossy": tree.lossy,
        "samples_skipped": tree.samples_skipped,
    }
    model: ReportModel = {
        "version": MODEL_VERSION,
        "summary": summary,
        "names": names.table,
        "kinds": list(KINDS),
        "statuses": list(STATUSES),
        "lanes": lanes,
        "bars": bars,
        "arrows": arrows,
        "critical": critical,
        "flame": _flame(
            tree_has_samples=has_samples(tree), roots=profile_sequence(tree).roots, names=names
        ),
    }
    on_step(100)
    return model


def _first_start(nodes: list[Node]) -> int:
    return min((n.start_ns for n in nodes if n.kind != KIND_SYNTHETIC), default=0)


def _iso(ns: int) -> str:
    moment = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _attributes(data: SequenceData) -> dict[tuple[int, int], Attributes]:
    return {(r.puid, r.iid): r.attributes for r in data.invocations if r.attributes}


def _lanes(layout: Layout, root: Node) -> tuple[list[Lane], dict[int, int], dict[int, int]]:
    """The lanes, and per track (by id) its lane and the row its outermost calls sit on.

    A thread's tracks share its lane: track 0 on top, each further track below the deepest
    row of those above it."""
    lanes: list[Lane] = []
    if root.kind == KIND_SYNTHETIC:
        lanes.append(_lane_fields(None, root.name, 1))
    by_process: dict[int, list[list[Track]]] = {}
    threads: dict[tuple[int, int], list[Track]] = {}
    for track in layout.tracks:  # ordered by thread (first activity), then index
        key = (track.process.puid, track.thread.tid)
        if key not in threads:
            threads[key] = []
            by_process.setdefault(track.process.puid, []).append(threads[key])
        threads[key].append(track)
    lane_of: dict[int, int] = {}
    row_of: dict[int, int] = {}
    for thread_tracks in (t for process in by_process.values() for t in process):
        offset = 0
        for track in thread_tracks:
            lane_of[id(track)] = len(lanes)
            row_of[id(track)] = offset
            offset += _track_depth(track)
        lanes.append(_lane_fields(thread_tracks[0], thread_tracks[0].thread.name, offset))
    return lanes, lane_of, row_of


def _lane_fields(track: Track | None, thread: str, rows: int) -> Lane:
    if track is None:
        return {
            "process": "",
            "host": "",
            "pid": 0,
            "puid": None,
            "thread": thread,
            "tid": 0,
            "state": "",
            "rows": rows,
        }
    process = track.process
    return {
        "process": f"{process.host}:{process.pid}",
        "host": process.host,
        "pid": process.pid,
        "puid": f"{process.puid:016x}",
        "thread": thread,
        "tid": track.thread.tid,
        "state": process.state,
        "rows": rows,
    }


def _track_depth(track: Track) -> int:
    """How many rows the track's calls need: its deepest nesting, plus one."""
    depth = deepest = 0
    for event in track.events:
        depth += 1 if event.opening else -1
        deepest = max(deepest, depth)
    return max(deepest, 1)


_T = TypeVar("_T", Node, ProfileNode)


class _Tree(NamedTuple):
    """The tree in preorder: its nodes, each one's depth and its caller's position (-1: none)."""

    nodes: list[Node]
    depths: list[int]
    parents: list[int]


def _preorder(
    roots: list[_T], drawn: Callable[[_T], bool] | None = None
) -> tuple[list[_T], list[int], list[int]]:
    """The trees under ``roots`` in preorder (calls or profile lines): the nodes, each one's depth
    and its caller's position (-1: none). A node ``drawn`` refuses is left out with all below it."""
    nodes: list[_T] = []
    depths: list[int] = []
    parents: list[int] = []
    stack: list[tuple[_T, int, int]] = [(root, 0, -1) for root in reversed(roots)]
    while stack:
        node, depth, parent = stack.pop()
        if drawn is not None and not drawn(node):
            continue
        own = len(nodes)
        nodes.append(node)
        depths.append(depth)
        parents.append(parent)
        if node.children:
            below = depth + 1
            stack.extend([(child, below, own) for child in reversed(node.children)])
    return nodes, depths, parents


def _bars(
    tree: _Tree,
    layout: Layout,
    lane_of: dict[int, int],
    row_of: dict[int, int],
    *,
    origin: int,
    end: int,
    names: Interned,
    attributes: dict[tuple[int, int], Attributes],
) -> Bars:
    """Columns: where each call is drawn comes from its track's events (its lane, and the row
    under the calls of its track that enclose it), the rest from the node itself."""
    nodes = tree.nodes
    count = len(nodes)
    index = {id(node): i for i, node in enumerate(nodes)}
    lane, row, start, stop = [0] * count, [0] * count, [0] * count, [0] * count
    is_open, placed = [False] * count, [False] * count
    for track in layout.tracks:
        track_lane, base, enclosing = lane_of[id(track)], row_of[id(track)], 0
        for event in track.events:
            if not event.opening:
                enclosing -= 1
                continue
            piece = event.slice
            i = index[id(piece.node)]
            lane[i], row[i], placed[i], is_open[i] = track_lane, base + enclosing, True, piece.open
            start[i] = piece.start_ns - origin
            stop[i] = max(piece.start_ns, piece.end_ns) - origin
            enclosing += 1
    for i in [i for i, done in enumerate(placed) if not done]:  # a synthetic root: spans its calls
        node = nodes[i]
        ended = end if node.end_ns is None else node.end_ns
        start[i], stop[i] = node.start_ns - origin, max(node.start_ns, ended) - origin
        is_open[i] = node.end_ns is None
    kind_of = {kind: i for i, kind in enumerate(KINDS)}
    status_of = {status: i for i, status in enumerate(STATUSES)}
    measured = [node.kind == KIND_MEASURED for node in nodes]
    return Bars(
        name=[names(node.name) for node in nodes],
        kind=[kind_of[node.kind] for node in nodes],
        status=[status_of[node.status] for node in nodes],
        lane=lane,
        row=row,
        depth=tree.depths,
        parent=tree.parents,
        start=start,
        end=stop,
        open=is_open,
        self=[node.self_ns for node in nodes],
        error=[node.error for node in nodes],
        iid=[f"{node.iid:x}" if m else None for node, m in zip(nodes, measured, strict=True)],
        handoff=[None if node.handoff is None else node.handoff.kind for node in nodes],
        detached=[node.detached for node in nodes],
        samples=[node.samples for node in nodes],
        cpu=[node.cpu_ns for node in nodes],
        frame=[None if node.frame is None else list(node.frame) for node in nodes],
        bounds=[_bounds(node.bounds, origin) for node in nodes],
        attributes=[
            attributes.get((node.process.puid, node.iid)) if m else None
            for node, m in zip(nodes, measured, strict=True)
        ],
    )


def _bounds(bounds: Bounds | None, origin: int) -> list[int | None] | None:
    if bounds is None:
        return None
    end_max = None if bounds.end_max_ns is None else bounds.end_max_ns - origin
    return [
        bounds.start_min_ns - origin,
        bounds.start_max_ns - origin,
        bounds.end_min_ns - origin,
        end_max,
    ]


def _arrows(nodes: list[Node], parents: list[int], origin: int) -> list[Arrow]:
    """As the Chrome export draws them: one per call that continues a hand-off whose submit time
    is known, from the call that submitted it (never from a synthetic root)."""
    arrows: list[Arrow] = []
    for i, node in enumerate(nodes):
        handoff = node.handoff
        parent = parents[i]
        if handoff is None or handoff.submitted_ns is None or parent < 0:
            continue
        if nodes[parent].kind == KIND_SYNTHETIC:
            continue
        arrows.append(
            {
                "from": parent,
                "to": i,
                "kind": handoff.kind,
                "submitted": handoff.submitted_ns - origin,
                "start": node.start_ns - origin,
                "queued": handoff.queued_ns,
            }
        )
    return arrows


def _flame(*, tree_has_samples: bool, roots: list[ProfileNode], names: Interned) -> Flame:
    """The profile's lines in preorder (those with nothing to draw left out, with what is below
    them), then each column in one comprehension."""

    def drawn(node: ProfileNode) -> bool:  # one with nothing to draw has no width
        return (node.samples if tree_has_samples else node.time_ns) > 0

    order, depths, parents = _preorder(roots, drawn)
    kind_of = {kind: i for i, kind in enumerate(KINDS)}
    return Flame(
        weight="samples" if tree_has_samples else "time",
        name=[names(node.name) for node in order],
        kind=[kind_of.get(node.kind, 0) for node in order],
        parent=parents,
        depth=depths,
        value=[node.samples if tree_has_samples else node.time_ns for node in order],
        time=[node.time_ns for node in order],
        self=[node.self_ns for node in order],
        samples=[node.samples for node in order],
        calls=[node.calls for node in order],
    )


def _critical(root: Node, nodes: list[Node]) -> list[int]:
    """The bar index of every call on the critical path, in the path's order."""
    bar_of = {id(node): at for at, node in enumerate(nodes)}
    return [bar_of[id(node)] for node in critical_path(root)]

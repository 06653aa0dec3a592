"""A sequence in the Chrome Trace Event Format, for Perfetto (https://ui.perfetto.dev) and
chrome://tracing.

Each process is a process track (``pid`` is its OS pid, named ``host:pid`` by a ``process_name``
metadata event) and each thread a thread track (``tid`` is the thread's per-process serial, named
by ``thread_name``). Calls that overlap on one thread without nesting (interleaved asyncio tasks)
get extra tracks of that thread, laid out by ``cmr.views.analyses.lanes``, because a viewer drops
slices that do not nest. Every call is a complete event (``ph: "X"``) whose category tells measured
calls from estimated ones (merged from samples); a call that raised also gets an instant event at
its end. Every hand-off whose submit time is known is a flow arrow from the submitting call to the
call that ran the work: ``ph: "s"`` at the submit time, ``ph: "f"`` (``bp: "e"``) at the start.

Times are microseconds from the sequence's first call, with nanosecond decimals: doubles cannot
hold absolute wall-clock microseconds to the nanosecond. ``otherData.start_ns`` is the wall-clock
origin. Two processes with the same OS pid (two hosts, or a reused pid) get distinct numbers.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from cmr.views.analyses.lanes import Layout, Slice, Track, lay_out
from cmr.views.model import STATUS_ERROR, Node, SequenceTree

EXPORTER: Final = "invoseq cmr"
#: Categories: calls (by node kind: measured, estimated), errors, and hand-off arrows.
CATEGORY_ERROR: Final = "error"
CATEGORY_HANDOFF: Final = "handoff"
FLOW_NAME: Final = "hand-off"


def render_chrome(tree: SequenceTree) -> bytes:
    """The trace JSON object (``traceEvents``, ``displayTimeUnit``, ``otherData``) of ``tree``,
    UTF-8."""
    layout = lay_out(tree)
    origin = layout.start_ns
    pids = _pids(layout.tracks)
    tids = _tids(layout.tracks)
    where = {id(track): (pids[track.process.puid], tids[id(track)]) for track in layout.tracks}
    events = _metadata(layout.tracks, where)
    for track in layout.tracks:
        pid, tid = where[id(track)]
        for piece in track.slices:
            events.append(_complete(piece, pid, tid, origin))
            node = piece.node
            if node.status == STATUS_ERROR:
                at = node.start_ns if node.end_ns is None else piece.end_ns
                events.append(
                    {
                        "name": f"raised {node.error or 'error'}",
                        "cat": CATEGORY_ERROR,
                        "ph": "i",
                        "s": "t",
                        "ts": _us(at - origin),
                        "pid": pid,
                        "tid": tid,
                        "args": {"call": node.name},
                    }
                )
    events += _flows(layout, where, origin)
    document = {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "seq": tree.seq.hex(),
            "start_ns": str(origin),
            "exporter": EXPORTER,
        },
    }
    return msgspec.json.encode(document)


def _us(ns: int) -> float | int:
    """Nanoseconds as microseconds: an int when whole, else a float to the nanosecond."""
    whole, rest = divmod(ns, 1_000)
    return whole if rest == 0 else ns / 1_000


def _complete(piece: Slice, pid: int, tid: int, origin: int) -> dict[str, Any]:
    node = piece.node
    args: dict[str, Any] = {"status": node.status, "iid": node.iid}
    if node.error is not None:
        args["error"] = node.error
    if node.self_ns is not None:
        args["self_ns"] = node.self_ns
    if node.handoff is not None:
        args["handoff"] = {
            "kind": node.handoff.kind,
            "hid": f"{node.handoff.hid:016x}",
            "queued_ns": node.handoff.queued_ns,
        }
    if node.samples:
        args["samples"] = node.samples
        args["self_samples"] = node.self_samples
    if node.cpu_ns is not None:
        args["cpu_ns"] = node.cpu_ns
    if node.frame is not None:
        file, function, line = node.frame
        args["frame"] = {"file": file, "function": function, "line": line}
    return {
        "name": node.name,
        "cat": node.kind,
        "ph": "X",
        "ts": _us(piece.start_ns - origin),
        "dur": _us(piece.end_ns - piece.start_ns),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _flows(layout: Layout, where: dict[int, tuple[int, int]], origin: int) -> list[dict[str, Any]]:
    """A start/finish pair, one id each, per hand-off whose submitter and submit time are known.
    Several calls may continue one hand-off (an asyncio task's top-level calls): one arrow each."""
    flows: list[dict[str, Any]] = []
    for track in layout.tracks:
        for piece in track.slices:
            node = piece.node
            submitter = _submitter(layout, node)
            if submitter is None or node.handoff is None or node.handoff.submitted_ns is None:
                continue
            flow_id = len(flows) // 2 + 1
            common = {"name": FLOW_NAME, "cat": CATEGORY_HANDOFF, "id": flow_id}
            from_pid, from_tid = where[id(submitter)]
            to_pid, to_tid = where[id(track)]
            flows.append(
                {
                    **common,
                    "ph": "s",
                    "ts": _us(node.handoff.submitted_ns - origin),
                    "pid": from_pid,
                    "tid": from_tid,
                    "args": {"kind": node.handoff.kind},
                }
            )
            flows.append(
                {
                    **common,
                    "ph": "f",
                    "bp": "e",
                    "ts": _us(node.start_ns - origin),
                    "pid": to_pid,
                    "tid": to_tid,
                    "args": {"kind": node.handoff.kind},
                }
            )
    return flows


def _submitter(layout: Layout, node: Node) -> Track | None:
    """The track of the call that handed ``node``'s work off (None for a synthetic caller)."""
    parent = layout.parent_of.get(id(node))
    if parent is None:
        return None
    return layout.track_of.get(id(parent))


def _metadata(tracks: list[Track], where: dict[int, tuple[int, int]]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    named: set[int] = set()
    for order, track in enumerate(tracks):
        pid, tid = where[id(track)]
        if pid not in named:
            named.add(pid)
            process = f"{track.process.host}:{track.process.pid}"
            events.append(_meta("process_name", pid, 0, {"name": process}))
            events.append(_meta("process_sort_index", pid, 0, {"sort_index": len(named)}))
        thread = f"{track.thread.name} ({track.thread.tid})"
        if track.index:
            thread += f" #{track.index + 1}"
        events.append(_meta("thread_name", pid, tid, {"name": thread}))
        events.append(_meta("thread_sort_index", pid, tid, {"sort_index": order}))
    return events


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def _pids(tracks: list[Track]) -> dict[int, int]:
    """puid -> the pid shown: the OS pid, unless another process of the trace has it already
    (or it is unknown), then the next number above every pid in the trace."""
    pids: dict[int, int] = {}
    taken: set[int] = set()
    clashes: list[int] = []
    for track in tracks:
        puid, pid = track.process.puid, track.process.pid
        if puid in pids or puid in clashes:
            continue
        if pid <= 0 or pid in taken:
            clashes.append(puid)
        else:
            pids[puid] = pid
            taken.add(pid)
    fresh = max(taken, default=0)
    for puid in clashes:
        fresh += 1
        pids[puid] = fresh
    return pids


def _tids(tracks: list[Track]) -> dict[int, int]:
    """id(track) -> tid: a thread's own serial for its first track, numbers above every serial of
    its process for its extra tracks."""
    highest: dict[int, int] = {}
    for track in tracks:
        puid = track.process.puid
        highest[puid] = max(highest.get(puid, 0), track.thread.tid)
    tids: dict[int, int] = {}
    for track in tracks:
        if track.index == 0:
            tids[id(track)] = track.thread.tid
        else:
            highest[track.process.puid] += 1
            tids[id(track)] = highest[track.process.puid]
    return tids

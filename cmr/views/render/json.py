"""The JSON documents of ``cmr show --json`` (and ``--threads --json``), ``cmr ls --json``,
``cmr profile --json`` and ``cmr stats --json``.

The shape is a public contract (``docs/protocol.md``): keys, their order and their types stay put.
Ids are integers except ``seq``, which is 32 hex digits. Trees are written iteratively — each node's
scalar fields are encoded on their own and the ``children`` arrays are stitched around them — since
both msgspec and the standard library encode nested containers recursively and give up after about
a thousand levels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from cmr.store.base import ProcessRecord, SamplerRecord, SequenceSummary, StoreStats
from cmr.views.analyses.diff import PathDelta
from cmr.views.analyses.profile import Profile, ProfileNode
from cmr.views.model import Handoff, Node, SequenceTree
from cmr.views.tree.processors import ThreadActivity

_encode = msgspec.json.Encoder().encode

if TYPE_CHECKING:  # cmr.views.analyses.top renders through the views that import this module
    from cmr.views.analyses.top import TopRow

#: Pieces (about one node each) a streamed document gathers before it hands them on.
CHUNK_PARTS = 4096


def node_fields(node: Node) -> dict[str, Any]:
    """Everything about a node except its children, in contract order; ``folded`` only on a
    node under which hand-offs that ran nothing traced were folded, ``detached`` only on a
    node that outlived its caller."""
    fields = {
        "name": node.name,
        "start_ns": node.start_ns,
        "end_ns": node.end_ns,
        "duration_ns": node.duration_ns,
        "self_ns": node.self_ns,
        "process": {"host": node.process.host, "pid": node.process.pid, "puid": node.process.puid},
        "thread": {"tid": node.thread.tid, "name": node.thread.name},
        "status": node.status,
        "error": node.error,
        "kind": node.kind,
        "handoff": _handoff(node.handoff),
        "samples": _samples(node),
        "frame": _frame(node.frame),
        "bounds": None if node.bounds is None else msgspec.structs.asdict(node.bounds),
        "attributes": node.attributes,
    }
    if node.folded:
        fields["folded"] = node.folded
    if node.detached:
        fields["detached"] = True
    return fields


def _samples(node: Node) -> dict[str, Any] | None:
    """Null for a node no sample fell in (and for every node when samples were not merged)."""
    if not node.samples and node.cpu_ns is None:
        return None
    return {"total": node.samples, "self": node.self_samples, "cpu_ns": node.cpu_ns}


def _frame(frame: tuple[str, str, int] | None) -> dict[str, Any] | None:
    if frame is None:
        return None
    file, function, line = frame
    return {"file": file, "function": function, "line": line}


def _handoff(handoff: Handoff | None) -> dict[str, Any] | None:
    if handoff is None:
        return None
    return {
        "kind": handoff.kind,
        "queued_ns": handoff.queued_ns,
        "submitted_ns": handoff.submitted_ns,
    }


def tree_to_json(tree: SequenceTree) -> str:
    """``{"seq", "status", "lossy", "dropped_by", "root": NODE}`` where NODE carries its
    ``children`` last."""
    return b"".join(iter_tree_json(tree)).decode()


def iter_tree_json(tree: SequenceTree) -> Iterator[bytes]:
    """``tree_to_json``'s document as UTF-8, in pieces of about CHUNK_BYTES: a 1,000,000-call
    tree is hundreds of megabytes of JSON, which ``cmr show --json`` writes as it goes."""
    dropped_by = [{"host": p.host, "pid": p.pid, "puid": p.puid} for p in tree.dropped_by]
    parts: list[bytes] = [
        b'{"seq":',
        _encode(tree.seq.hex()),
        b',"status":',
        _encode(tree.status),
        b',"lossy":',
        _encode(tree.lossy),
        b',"dropped_by":',
        _encode(dropped_by),
        b',"root":',
    ]
    yield from _stitch(parts, tree.root, node_fields, _node_children)
    parts.append(b"}")
    yield b"".join(parts)


def critical_path_to_json(tree: SequenceTree, path: list[Node]) -> str:
    """``{"seq": ..., "path": [NODE, ...]}``: the critical path's calls from the root down,
    each with ``show --json``'s node fields (without children)."""
    return _encode({"seq": tree.seq.hex(), "path": [node_fields(node) for node in path]}).decode()


def diff_to_json(rows: list[PathDelta]) -> str:
    """``cmr diff --json``: ``[{"path", "a_ns", "b_ns", "delta_ns"}, ...]``, largest change
    first."""
    return _encode(
        [
            {"path": row.path, "a_ns": row.a_ns, "b_ns": row.b_ns, "delta_ns": row.delta_ns}
            for row in rows
        ]
    ).decode()


def top_to_json(rows: list[TopRow], *, with_self: bool) -> str:
    """``cmr top --json``: a list of rows, ``self_ns`` in each when per method."""
    return _encode(top_fields(rows, with_self=with_self)).decode()


def top_fields(rows: list[TopRow], *, with_self: bool) -> list[dict[str, Any]]:
    """The rows of ``cmr top --json`` as plain data."""
    documents = []
    for row in rows:
        fields: dict[str, Any] = {
            "name": row.name,
            "count": row.count,
            "errors": row.errors,
            "p50_ns": row.percentile(0.5),
            "p90_ns": row.percentile(0.9),
            "p99_ns": row.percentile(0.99),
            "max_ns": row.max_ns,
        }
        if with_self:
            fields["self_ns"] = row.self_ns
        documents.append(fields)
    return documents


def _node_children(node: Node) -> list[Node]:
    return node.children


T = TypeVar("T")


def _stitch(
    parts: list[bytes],
    root: T,
    fields: Callable[[T], dict[str, Any]],
    children_of: Callable[[T], Sequence[T]],
) -> Iterator[bytes]:
    """Append the tree under ``root`` to ``parts``: each node's fields, then its ``children``.
    Whenever ``parts`` holds CHUNK_PARTS pieces, they are joined, yielded and cleared."""
    stack: list[T | bytes] = [root]
    encode = _encode
    append = parts.append
    while stack:
        item = stack.pop()
        if isinstance(item, bytes):
            append(item)
            continue
        if len(parts) >= CHUNK_PARTS:
            yield b"".join(parts)
            parts.clear()
        append(encode(fields(item))[:-1] + b',"children":[')
        stack.append(b"]}")
        children = children_of(item)
        for position in range(len(children) - 1, -1, -1):
            stack.append(children[position])
            if position:
                stack.append(b",")


def profile_fields(node: ProfileNode) -> dict[str, Any]:
    """Everything about a profile node except its children, in contract order."""
    thread = node.thread
    return {
        "name": node.name,
        "kind": node.kind,
        "frame": _frame(node.frame),
        "thread": None
        if thread is None
        else {
            "host": thread.host,
            "pid": thread.pid,
            "puid": thread.puid,
            "tid": thread.tid,
            "name": thread.name,
        },
        "calls": node.calls,
        "samples": node.samples,
        "self_samples": node.self_samples,
        "time_ns": node.time_ns,
        "self_ns": node.self_ns,
        "cpu_ns": node.cpu_ns,
        "off_cpu_ns": node.off_cpu_ns,
    }


def profile_to_json(
    profile: Profile,
    *,
    seq: bytes | None = None,
    method: str | None = None,
    since_ns: int | None = None,
    lines: bool = False,
) -> str:
    """``{"seq", "method", "since_ns", "sequences", "samples_skipped", "by_thread", "lines",
    "roots": [PROFILE_NODE]}``; PROFILE_NODE carries its ``children`` last."""
    head = {
        "seq": None if seq is None else seq.hex(),
        "method": method,
        "since_ns": since_ns,
        "sequences": profile.sequences,
        "samples_skipped": profile.samples_skipped,
        "by_thread": profile.by_thread,
        "lines": lines,
    }
    parts = [_encode(head)[:-1], b',"roots":[']
    pieces: list[bytes] = []
    for position, root in enumerate(profile.roots):
        if position:
            parts.append(b",")
        pieces.extend(_stitch(parts, root, profile_fields, _profile_children))
    parts.append(b"]}")
    pieces.append(b"".join(parts))
    return b"".join(pieces).decode()


def _profile_children(node: ProfileNode) -> list[ProfileNode]:
    return node.children


def thread_activity_to_json(activity: list[ThreadActivity]) -> str:
    """An array, in order of first activity, of
    ``{"process", "thread", "invocations", "busy_ns", "first_start_ns"}``."""
    return _encode(
        [
            {
                "process": {
                    "host": entry.process.host,
                    "pid": entry.process.pid,
                    "puid": entry.process.puid,
                },
                "thread": {"tid": entry.thread.tid, "name": entry.thread.name},
                "invocations": entry.invocations,
                "busy_ns": entry.busy_ns,
                "first_start_ns": entry.first_start_ns,
            }
            for entry in activity
        ]
    ).decode()


def summary_fields(summary: SequenceSummary) -> dict[str, Any]:
    duration = None if summary.end_ns is None else max(0, summary.end_ns - summary.start_ns)
    return {
        "seq": summary.seq.hex(),
        "root": summary.root,
        "start_ns": summary.start_ns,
        "duration_ns": duration,
        "invocations": summary.invocations,
        "threads": summary.threads,
        "processes": summary.processes,
        "status": summary.status,
        "lossy": summary.lossy,
        "error": summary.error,
    }


def summary_to_json(summary: SequenceSummary) -> str:
    """One listing line as one JSON object, as ``summaries_to_json`` writes each."""
    return _encode(summary_fields(summary)).decode()


def summaries_to_json(summaries: list[SequenceSummary]) -> str:
    return _encode([summary_fields(summary) for summary in summaries]).decode()


def process_fields(process: ProcessRecord) -> dict[str, Any]:
    return {
        "host": process.host,
        "pid": process.pid,
        "puid": process.puid,
        "platform_id": process.platform_id,
        "argv": list(process.argv),
        "dropped": process.dropped,
        "last_seen_ns": process.last_seen_ns,
        "ended": process.ended,
        "heartbeat_ms": process.heartbeat_ms,
        "state": process.state,
    }


def sampler_fields(report: SamplerRecord | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {
        "mode": report.mode,
        "interval_ms": report.interval_ms,
        "ticks": report.ticks,
        "late_ticks": report.late_ticks,
        "cost_ns": report.cost_ns,
        "current_interval_ns": report.current_interval_ns,
        "longest_interval_ns": report.longest_interval_ns,
        "dropped_samples": report.dropped_samples,
    }


def stats_to_json(stats: StoreStats) -> str:
    """Keys added after the first release (``samples``, a process's ``sampler``) come last."""
    return _encode(
        {
            "batches": stats.batches,
            "duplicate_batches": stats.duplicate_batches,
            "events": stats.events,
            "rejected": dict(stats.rejected),
            "processes": [
                {
                    **process_fields(process),
                    "sampler": sampler_fields(stats.samplers.get(process.puid)),
                }
                for process in stats.processes
            ],
            "samples": stats.samples,
        }
    ).decode()

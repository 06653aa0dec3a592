"""The JSON documents of ``cmr show --json`` (and ``--threads --json``), ``cmr ls --json`` and
``cmr stats --json``.

The shape is a public contract (``docs/protocol.md``): keys, their order and their types stay put.
Ids are integers except ``seq``, which is 32 hex digits. Trees are written iteratively — each node's
scalar fields are encoded on their own and the ``children`` arrays are stitched around them — since
both msgspec and the standard library encode nested containers recursively and give up after about
a thousand levels.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cmr.store.base import ProcessRecord, SequenceSummary, StoreStats
from cmr.views.calltree import Handoff, Node, SequenceTree
from cmr.views.processors import ThreadActivity

_encode = msgspec.json.Encoder().encode


def node_fields(node: Node) -> dict[str, Any]:
    """Everything about a node except its children, in contract order."""
    return {
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
    }


def _handoff(handoff: Handoff | None) -> dict[str, Any] | None:
    if handoff is None:
        return None
    return {
        "kind": handoff.kind,
        "queued_ns": handoff.queued_ns,
        "submitted_ns": handoff.submitted_ns,
    }


def tree_to_json(tree: SequenceTree) -> str:
    """``{"seq", "status", "root": NODE}`` where NODE carries its ``children`` last."""
    parts: list[bytes] = [
        b'{"seq":',
        _encode(tree.seq.hex()),
        b',"status":',
        _encode(tree.status),
        b',"root":',
    ]
    stack: list[Node | bytes] = [tree.root]
    while stack:
        item = stack.pop()
        if isinstance(item, bytes):
            parts.append(item)
            continue
        parts.append(_encode(node_fields(item))[:-1] + b',"children":[')
        stack.append(b"]}")
        children = item.children
        for position in range(len(children) - 1, -1, -1):
            stack.append(children[position])
            if position:
                stack.append(b",")
    parts.append(b"}")
    return b"".join(parts).decode()


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
    }


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


def stats_to_json(stats: StoreStats) -> str:
    return _encode(
        {
            "batches": stats.batches,
            "duplicate_batches": stats.duplicate_batches,
            "events": stats.events,
            "rejected": dict(stats.rejected),
            "processes": [process_fields(process) for process in stats.processes],
        }
    ).decode()

"""A sequence's tree as OpenTelemetry spans: the one conversion behind ``cmr export --format otlp``
(OTLP/JSON, ``cmr.otlp.render``) and ``cmr forward`` (the SDK's exporter, ``cmr.otlp.forward``).

One span per node of the tree, measured and estimated alike, in one trace whose id is the
sequence's. Each process is a resource (``service.name`` from its command line, ``host.name``,
``process.pid``, ``invoseq.puid``). A span's parent is its node's parent in the tree, so a call
handed off to another thread or process hangs under the call that submitted it, with the hop's
kind and queue wait as attributes. A sequence a foreign system started has no root of its own here:
its entry calls name the foreign caller's span (their hand-off id, the W3C parent-id they arrived
with) as their remote parent, so they line up under the caller's trace in the team's backend. A
``<unknown root>`` (lost events) is a span of its own, as ``cmr show`` draws it.

**Span ids** are 8 bytes, derived, never drawn, so exporting or forwarding a sequence twice gives
the same ids (a backend sees the same spans again, not new ones): the 8-byte BLAKE2b digest of
the big-endian ``puid`` and ``iid`` (personalisation ``invoseq.span``); an estimated node hashes
its nearest measured ancestor's ``puid`` and ``iid`` and the ``file\\0function\\0`` of every
estimated frame from there down to it (``invoseq.estimate``: sibling frames differ in file or
function, so the path is unique); the ``<unknown root>`` hashes the sequence id
(``invoseq.root``). An id that comes out 0, or that an earlier span of the trace (in tree order)
or a remote parent already has, is hashed again with a 4-byte counter appended (1, 2, ...) until
it is neither. docs/protocol.md specifies it.

**Times** are the tree's. A call that has not ended lasts, like on the timelines of the other
exports, until the latest time the sequence shows, or until its caller on the same thread ended;
``invoseq.running`` (it may still end) or ``invoseq.incomplete`` (its process ended or was lost:
it never will) says so. An estimated node spans the window its samples fell in; its estimated time
is ``invoseq.estimated_duration_ns``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from cmr.store.base import REMOTE_PARENT, InvocationRecord, MethodRecord, SequenceData
from cmr.views.analyses.lanes import extent
from cmr.views.model import (
    HANDOFF_REMOTE,
    KIND_ESTIMATED,
    KIND_MEASURED,
    KIND_SYNTHETIC,
    STATUS_ERROR,
    STATUS_INCOMPLETE,
    STATUS_RUNNING,
    Node,
    SequenceTree,
    service_name,
)

AttributeValue = str | int | float | bool | tuple[str, ...]
Attributes = dict[str, AttributeValue]

#: The instrumentation scope every span is reported under.
SCOPE_NAME: Final = "invoseq"
#: Span kinds used (OpenTelemetry's names): a call that continued a request from another
#: service serves it; everything else is internal.
KIND_INTERNAL: Final = "internal"
KIND_SERVER: Final = "server"
#: The service name of a process whose command line is unknown (OpenTelemetry's convention),
#: and of the resource holding an ``<unknown root>``.
UNKNOWN_SERVICE: Final = "unknown_service"
SYNTHETIC_SERVICE: Final = "invoseq"

_SPAN_ID_BYTES: Final = 8
_PERSON_MEASURED: Final = b"invoseq.span"
_PERSON_ESTIMATED: Final = b"invoseq.estimate"
_PERSON_ROOT: Final = b"invoseq.root"


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: Attributes


@dataclass(frozen=True, slots=True)
class Span:
    """One node of the tree as a span. ``parent_id`` 0: a root span of the trace;
    ``parent_remote``: the parent ran in another process (or outside this repository)."""

    span_id: int
    parent_id: int
    parent_remote: bool
    name: str
    kind: str  # KIND_INTERNAL | KIND_SERVER
    start_ns: int
    end_ns: int
    attributes: Attributes
    error: str | None  # the exception type when the call raised: the span's status is ERROR
    events: tuple[SpanEvent, ...] = ()


@dataclass(slots=True)
class Resource:
    """One process (or the synthetic root's stand-in) and its spans, in tree order."""

    attributes: Attributes
    spans: list[Span] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Trace:
    trace_id: bytes  # the sequence id, 16 bytes
    resources: list[Resource]
    scope_version: str
    # (puid, iid) -> span id of each measured call: what a profile sample links to.
    measured: dict[tuple[int, int], int] = field(default_factory=dict)
    resource_of: dict[int, Resource] = field(default_factory=dict)  # puid -> its resource


class _Parent(NamedTuple):
    """What a node needs from its parent: the parent's span, where it ran and ended, and the
    anchor estimated nodes derive their ids from (nearest measured puid and iid, frame path)."""

    span_id: int
    puid: int
    tid: int
    end_ns: int
    foreign: bool  # the parent is a span outside this repository
    anchor: tuple[int, int, bytes]


def to_trace(tree: SequenceTree, data: SequenceData) -> Trace:
    """The spans of ``tree``, which was built (and maybe merged with samples) from ``data``."""
    records = {(r.puid, r.iid): r for r in reversed(data.invocations)}  # the first record wins
    ids = _SpanIds(taken=set(_remote_parent_ids(tree.root)))
    latest = _latest_ns(tree)
    dropped = {process.puid for process in tree.dropped_by}
    resources: dict[int, Resource] = {}
    measured: dict[tuple[int, int], int] = {}
    stack: list[tuple[Node, _Parent | None]] = []
    root = tree.root
    if _is_remote_parent(root):
        stack.extend((child, _foreign_parent(child)) for child in reversed(root.children))
    else:
        stack.append((root, None))
    while stack:
        node, parent = stack.pop()
        span_id, anchor = _span_id(ids, node, parent, tree.seq)
        end = _end_ns(node, latest, parent)
        key = -1 if node.kind == KIND_SYNTHETIC else node.process.puid
        resource = resources.get(key)
        if resource is None:
            resource = resources[key] = _resource(node, data, dropped)
        resource.spans.append(
            _span(node, span_id=span_id, parent=parent, end_ns=end, records=records, data=data)
        )
        if node.kind == KIND_MEASURED:
            measured[node.process.puid, node.iid] = span_id
        here = _Parent(span_id, node.process.puid, node.thread.tid, end, False, anchor)
        stack.extend((child, here) for child in reversed(node.children))
    processes = {puid: resource for puid, resource in resources.items() if puid >= 0}
    return Trace(tree.seq, list(resources.values()), _version(), measured, processes)


def _is_remote_parent(node: Node) -> bool:
    return node.kind == KIND_SYNTHETIC and node.name == REMOTE_PARENT


def _foreign_parent(entry: Node) -> _Parent | None:
    """A child of a ``<remote parent>`` hangs under the foreign span it arrived from (its
    hand-off id), or is a root span when it has none (an orphan)."""
    handoff = entry.handoff
    if handoff is None or handoff.kind != HANDOFF_REMOTE:
        return None
    return _Parent(handoff.hid, 0, 0, 0, True, (0, 0, b""))


def _remote_parent_ids(root: Node) -> list[int]:
    if not _is_remote_parent(root):
        return []
    return [
        child.handoff.hid
        for child in root.children
        if child.handoff is not None and child.handoff.kind == HANDOFF_REMOTE
    ]


def _latest_ns(tree: SequenceTree) -> int:
    span = extent(tree)
    return 0 if span is None else span[1]


def _end_ns(node: Node, latest: int, parent: _Parent | None) -> int:
    """The node's end; for one still open, the latest time shown, or its caller's end on the
    same thread (a call cannot outlive its caller on one thread)."""
    if node.end_ns is not None:
        return max(node.start_ns, node.end_ns)
    end = latest
    if parent is not None and (parent.puid, parent.tid) == (node.process.puid, node.thread.tid):
        end = min(end, parent.end_ns)
    return max(node.start_ns, end)


class _SpanIds:
    """Hands out derived span ids, unique within the trace and never 0."""

    def __init__(self, taken: set[int]) -> None:
        self._taken = taken

    def take(self, material: bytes, person: bytes) -> int:
        counter = 0
        while True:
            tail = counter.to_bytes(4, "big") if counter else b""
            digest = hashlib.blake2b(material + tail, digest_size=_SPAN_ID_BYTES, person=person)
            span_id = int.from_bytes(digest.digest(), "big")
            if span_id and span_id not in self._taken:
                self._taken.add(span_id)
                return span_id
            counter += 1


def span_id_material(puid: int, iid: int) -> bytes:
    """What a measured invocation's span id hashes: its ``puid`` and ``iid``, big-endian."""
    return puid.to_bytes(8, "big") + iid.to_bytes(8, "big")


def _span_id(
    ids: _SpanIds, node: Node, parent: _Parent | None, seq: bytes
) -> tuple[int, tuple[int, int, bytes]]:
    """The node's span id, and the anchor its estimated descendants derive theirs from."""
    if node.kind == KIND_MEASURED:
        puid, iid = node.process.puid, node.iid
        return ids.take(span_id_material(puid, iid), _PERSON_MEASURED), (puid, iid, b"")
    if node.kind == KIND_ESTIMATED and parent is not None:
        file, function, _ = node.frame or ("", node.name, 0)
        puid, iid, path = parent.anchor
        path += f"{file}\0{function}\0".encode(errors="surrogatepass")
        return ids.take(span_id_material(puid, iid) + path, _PERSON_ESTIMATED), (puid, iid, path)
    return ids.take(seq, _PERSON_ROOT), (0, 0, b"")


def _resource(node: Node, data: SequenceData, dropped: set[int]) -> Resource:
    if node.kind == KIND_SYNTHETIC:
        return Resource({"service.name": SYNTHETIC_SERVICE, "invoseq.synthetic": True})
    process = node.process
    info = data.processes.get(process.puid)
    attributes: Attributes = {
        "service.name": UNKNOWN_SERVICE if info is None else service_name(info.argv),
        "host.name": process.host,
        "process.pid": process.pid,
        "invoseq.puid": process.puid,
        "invoseq.process.state": process.state,
    }
    if info is not None:
        attributes["host.id"] = info.platform_id
        attributes["process.command_args"] = info.argv
    if process.puid in dropped:
        attributes["invoseq.dropped_events"] = True  # some calls of this process may be missing
    return Resource(attributes)


def _span(
    node: Node,
    *,
    span_id: int,
    parent: _Parent | None,
    end_ns: int,
    records: dict[tuple[int, int], InvocationRecord],
    data: SequenceData,
) -> Span:
    """Invocation attributes come first: invoseq's own facts about the call win a clash."""
    record = records.get((node.process.puid, node.iid)) if node.kind == KIND_MEASURED else None
    attributes: Attributes = dict(record.attributes or {}) if record is not None else {}
    method = None if record is None else data.methods.get((record.puid, record.method))
    attributes.update(_code(node, method))
    attributes.update(_facts(node, data))
    error = (node.error or "error") if node.status == STATUS_ERROR else None
    events = () if error is None else (SpanEvent("exception", end_ns, {"exception.type": error}),)
    handoff = node.handoff
    # Remote: the parent ran in another process (a synthetic root, puid 0, ran nowhere).
    remote = parent is not None and (parent.foreign or parent.puid not in (0, node.process.puid))
    return Span(
        span_id=span_id,
        parent_id=0 if parent is None else parent.span_id,
        parent_remote=remote,
        name=node.name,
        kind=KIND_SERVER
        if handoff is not None and handoff.kind == HANDOFF_REMOTE
        else KIND_INTERNAL,
        start_ns=node.start_ns,
        end_ns=end_ns,
        attributes=attributes,
        error=error,
        events=events,
    )


def _code(node: Node, method: MethodRecord | None) -> Attributes:
    """Where the call's code is: its method's for a measured call, its frame's for an estimate."""
    if method is not None:
        code: Attributes = {"code.function": method.qualname, "code.namespace": method.module}
        if method.file:
            code["code.filepath"] = method.file
            code["code.lineno"] = method.line
        return code
    if node.frame is not None:
        file, function, line = node.frame
        return {"code.function": function, "code.filepath": file, "code.lineno": line}
    return {}


def _facts(node: Node, data: SequenceData) -> Attributes:
    """What invoseq knows about the call beyond its times."""
    facts: Attributes = {"invoseq.status": node.status}
    if node.kind == KIND_SYNTHETIC:
        facts["invoseq.synthetic"] = True
    else:
        info = data.threads.get((node.process.puid, node.thread.tid))
        if info is not None:
            facts["thread.id"] = info.native_id
        facts["thread.name"] = node.thread.name
        facts["invoseq.tid"] = node.thread.tid
    if node.kind == KIND_MEASURED:
        facts["invoseq.iid"] = node.iid
    if node.status == STATUS_RUNNING:
        facts["invoseq.running"] = True
    elif node.status == STATUS_INCOMPLETE:
        facts["invoseq.incomplete"] = True
    if node.error is not None:
        facts["invoseq.error"] = node.error
    if node.self_ns is not None:
        facts["invoseq.self_ns"] = node.self_ns
    if node.kind == KIND_ESTIMATED:
        facts["invoseq.estimated"] = True
        if node.duration_ns is not None:
            facts["invoseq.estimated_duration_ns"] = node.duration_ns
    facts.update(_sample_facts(node))
    facts.update(_handoff_facts(node))
    return facts


def _sample_facts(node: Node) -> Attributes:
    if not node.samples and node.cpu_ns is None:
        return {}
    facts: Attributes = {"invoseq.samples": node.samples, "invoseq.self_samples": node.self_samples}
    if node.cpu_ns is not None:
        facts["invoseq.cpu_ns"] = node.cpu_ns
    return facts


def _handoff_facts(node: Node) -> Attributes:
    """The hop that brought the call here: a span's parent is the call that submitted it."""
    handoff = node.handoff
    if handoff is None:
        return {}
    facts: Attributes = {
        "invoseq.handoff.kind": handoff.kind,
        "invoseq.handoff.id": f"{handoff.hid:016x}",
    }
    if handoff.queued_ns is not None:
        facts["invoseq.handoff.queued_ns"] = handoff.queued_ns
    if handoff.submitted_ns is not None:
        facts["invoseq.handoff.submitted_ns"] = handoff.submitted_ns
    return facts


def _version() -> str:
    from importlib import metadata  # only when exporting: `cmr --help` stays quick

    try:
        return metadata.version("invoseq")
    except metadata.PackageNotFoundError:
        return "0"

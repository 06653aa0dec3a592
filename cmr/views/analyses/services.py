"""The service map (``cmr map``, and ``cmr ui``'s map page): the services the selected sequences
ran in as nodes, the hand-offs between them as edges.

A **service** is what a process serves: for a server or worker started by its launcher
(``gunicorn storefront:app``, ``uvicorn pricing:app``, ``celery -A tasks worker``) the
application's module (``storefront``, ``pricing``, ``tasks``), else the program itself
(``model.service_name``: the script or module, what ``--format otlp`` calls ``service.name``).
Every process of a gunicorn master and its workers is one service.

An **edge** is a hand-off that crossed processes, from the service of the process that handed
the work off to the service of the process whose call continued it (the hop ``cmr show``
marks), of one kind: ``process`` (multiprocessing, subprocess, a fork), or for a ``remote``
hand-off (headers carried across), what the called side recorded on its call: ``http`` (a
request served: ``http.request.method``), ``grpc`` (``rpc.system``), ``queue`` (a task a worker
ran: Celery's ``celery.task.name``, RQ's ``messaging.system``), else ``remote``. Hand-offs to
another thread or task stay inside one process, and one service: they make no edge. Per edge:
how many calls continued such a hand-off, how many of them raised (the far side's call ended in
error), the 50th and 99th percentile of their durations (the far side's call, from its start to
its end: what the caller saw, less the way there and back), the median queue wait (from the
hand-off to the start of that call: for a task queue, the time the task waited for a worker),
and the sequences it was seen in. Percentiles are ``cmr top``'s (nearest-rank, over what ended).

Each sequence is read whole (``Store.load_sequence``, without samples), so a map reads at most
``limit`` sequences, the newest the query selects; ``ServiceMap.bounded`` says when there were
more.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from cmr.store.base import ProcessRecord, SequenceQuery, SequenceSummary, Store
from cmr.store.columns import handed_off
from cmr.store.records import SequenceData
from cmr.views.analyses.top import percentile
from cmr.views.model import service_name
from cmr.views.tree.records import duration, queued_ns

#: Edge kinds.
KIND_PROCESS: Final = "process"
KIND_HTTP: Final = "http"
KIND_GRPC: Final = "grpc"
KIND_QUEUE: Final = "queue"
KIND_REMOTE: Final = "remote"
#: The attribute of the called side's call that tells a remote hand-off's kind, first found wins.
_REMOTE_KINDS: Final = (
    ("celery.task.name", KIND_QUEUE),
    ("messaging.system", KIND_QUEUE),
    ("rpc.system", KIND_GRPC),
    ("http.request.method", KIND_HTTP),
)
#: How many sequences a map reads when not told: each is read whole.
DEFAULT_LIMIT: Final = 500
#: Programs that serve an application named on their command line (``module:attribute``, or
#: Celery's ``-A module``): their service is the application.
LAUNCHERS: Final = frozenset(
    {"gunicorn", "uvicorn", "hypercorn", "daphne", "waitress", "waitress-serve", "celery"}
)
_APPLICATION: Final = re.compile(r"^([A-Za-z_][\w.]*):[A-Za-z_][\w.]*(\(.*\))?$")
UNKNOWN_SERVICE: Final = "<unknown process>"


@dataclass(frozen=True, slots=True)
class Service:
    name: str  # the application a launcher serves, else the program
    program: str  # model.service_name: the script or module the process ran


def service_of(process: ProcessRecord | None) -> Service:
    """The service a process serves (module docstring)."""
    if process is None:
        return Service(UNKNOWN_SERVICE, UNKNOWN_SERVICE)
    program = service_name(process.argv)
    base = os.path.basename(program)
    if base in LAUNCHERS:
        application = _application(process.argv, celery=base == "celery")
        if application:
            return Service(application, base)
    return Service(program, program)


def _application(argv: tuple[str, ...], *, celery: bool) -> str | None:
    """The module a launcher's command line serves: Celery's ``-A``/``--app`` value, else the
    last argument shaped ``module:attribute`` (an address such as ``127.0.0.1:80`` is not)."""
    found = None
    for at, arg in enumerate(argv[1:], start=1):
        if celery:
            if arg in ("-A", "--app") and at + 1 < len(argv):
                found = argv[at + 1]
            elif arg.startswith("--app="):
                found = arg[len("--app=") :]
            elif arg.startswith("-A") and len(arg) > 2:
                found = arg[2:]
        elif match := _APPLICATION.match(arg):
            found = match.group(1)
    return (found.split(":")[0] or None) if found else None


def hop_kind(kind: str, attributes: dict[str, Any] | None) -> str | None:
    """An edge's kind from its hand-off's kind and the attributes of the call that continued
    it; None for a hand-off within a process (a thread, a task)."""
    if kind == KIND_PROCESS:
        return KIND_PROCESS
    if kind != KIND_REMOTE:
        return None
    for key, edge_kind in _REMOTE_KINDS:
        if attributes and key in attributes:
            return edge_kind
    return KIND_REMOTE


@dataclass(slots=True)
class Edge:
    source: str
    target: str
    kind: str
    count: int = 0
    errors: int = 0
    durations: list[int] = field(default_factory=list)  # the far side's calls that ended
    waits: list[int] = field(default_factory=list)  # their queue waits
    seqs: list[bytes] = field(default_factory=list)  # the sequences it was seen in, newest first

    def percentile(self, share: float) -> int | None:
        return percentile(self.durations, share)

    @property
    def queued_p50(self) -> int | None:
        return percentile(self.waits, 0.5)


@dataclass(slots=True)
class ServiceNode:
    name: str
    program: str
    processes: set[int] = field(default_factory=set)
    sequences: int = 0  # the sequences that ran in it
    entries: int = 0  # the sequences that started in it (their root call ran in it)


@dataclass(slots=True)
class ServiceMap:
    nodes: dict[str, ServiceNode] = field(default_factory=dict)
    edges: dict[tuple[str, str, str], Edge] = field(default_factory=dict)
    sequences: list[SequenceSummary] = field(default_factory=list)  # the sequences read
    limit: int = DEFAULT_LIMIT
    bounded: bool = False  # the query selects more than ``limit``: only the newest were read

    def node(self, service: Service) -> ServiceNode:
        found = self.nodes.get(service.name)
        if found is None:
            found = self.nodes[service.name] = ServiceNode(service.name, service.program)
        return found

    def add(self, data: SequenceData) -> None:
        """One sequence's services and hand-offs."""
        services = {puid: service_of(info) for puid, info in data.processes.items()}
        for puid, service in services.items():
            self.node(service).processes.add(puid)
        for name in {service.name for service in services.values()}:
            self.nodes[name].sequences += 1
        entry = _entry(data)
        if entry is not None:
            self.node(services.get(entry) or service_of(None)).entries += 1
        for record in handed_off(data.invocations):
            handoff = data.handoffs.get(record.hid)
            if handoff is None:
                continue
            kind = hop_kind(handoff.kind, record.attributes)
            if kind is None:
                continue
            source = self.node(services.get(handoff.puid) or service_of(None)).name
            target = self.node(services.get(record.puid) or service_of(None)).name
            edge = self.edges.get((source, target, kind))
            if edge is None:
                edge = self.edges[source, target, kind] = Edge(source, target, kind)
            edge.count += 1
            edge.errors += record.error is not None
            took = duration(record)
            if took is not None:
                edge.durations.append(took)
            edge.waits.append(queued_ns(record, handoff))
            if not edge.seqs or edge.seqs[-1] != data.seq:
                edge.seqs.append(data.seq)

    def depths(self) -> dict[str, int]:
        """Each service's hops from the entry services (those sequences started in, else those
        no edge reaches): the columns of the drawn map, left to right."""
        entries = [node.name for node in self.nodes.values() if node.entries]
        reached = {target for (_source, target, _kind) in self.edges}
        if not entries:
            entries = [name for name in self.nodes if name not in reached]
        found = dict.fromkeys(entries, 0)
        queue = deque(sorted(entries))
        while queue:
            name = queue.popleft()
            for source, target, _kind in sorted(self.edges):
                if source == name and target not in found:
                    found[target] = found[name] + 1
                    queue.append(target)
        for name in sorted(self.nodes):  # in a cycle nothing enters: the first column
            found.setdefault(name, 0)
        return found

    def ordered_edges(self) -> list[Edge]:
        """The edges by the depth of their source, then by name and kind."""
        depth = self.depths()
        return sorted(
            self.edges.values(), key=lambda e: (depth[e.source], e.source, e.target, e.kind)
        )


def _entry(data: SequenceData) -> int | None:
    """The process of the sequence's root call (no caller, no hand-off), else of its first call
    continuing a hand-off nobody here recorded (a foreign caller's)."""
    for record in data.invocations:  # the root is nearly always the first, in start order
        if not record.parent and not record.hid:
            return record.puid
    foreign = [r for r in handed_off(data.invocations) if r.hid not in data.handoffs]
    return foreign[0].puid if foreign else None


def service_map(store: Store, query: SequenceQuery, limit: int = DEFAULT_LIMIT) -> ServiceMap:
    """The map of the newest ``limit`` sequences ``query`` selects."""
    lines = store.list_sequences(limit + 1, query)
    return mapped(store, lines[:limit], limit=limit, bounded=len(lines) > limit)


def mapped(
    store: Store, lines: Iterable[SequenceSummary], *, limit: int, bounded: bool
) -> ServiceMap:
    """The map of the sequences of ``lines``, read from ``store``."""
    found = ServiceMap(limit=limit, bounded=bounded)
    for line in lines:
        found.sequences.append(line)
        found.add(store.load_sequence(line.seq, samples=False))
    return found


def map_fields(found: ServiceMap) -> dict[str, Any]:
    """``cmr map --json``'s document (docs/guide.md, "cmr map")."""
    depth = found.depths()
    return {
        "sequences": len(found.sequences),
        "limit": found.limit,
        "bounded": found.bounded,
        "nodes": [
            {
                "name": node.name,
                "program": node.program,
                "processes": len(node.processes),
                "sequences": node.sequences,
                "entries": node.entries,
                "depth": depth[node.name],
            }
            for node in sorted(found.nodes.values(), key=lambda n: (depth[n.name], n.name))
        ],
        "edges": [
            {
                "source": edge.source,
                "target": edge.target,
                "kind": edge.kind,
                "count": edge.count,
                "errors": edge.errors,
                "p50_ns": edge.percentile(0.5),
                "p99_ns": edge.percentile(0.99),
                "queued_p50_ns": edge.queued_p50,
                "sequences": [seq.hex() for seq in edge.seqs],
            }
            for edge in found.ordered_edges()
        ],
    }

"""A sequence in the Firefox Profiler's processed profile format (https://profiler.firefox.com,
"Load a profile from file"): ``cmr export --format firefox``.

**Version.** ``meta.preprocessedProfileVersion`` 57, as documented by the profiler's
``docs-developer/CHANGELOG-formats.md`` (versions 41 to 57; firefox-devtools/profiler commit
aac2c134f47c2d4b9d7b5927132a8cd55c010f09) and typed by its ``src/types/profile.ts`` and
``src/types/markers.ts``; version 57 is also what samply's ``fxprof-processed-profile`` writes.
The profiler upgrades it to its current version when it loads it. At 57: one string array for the
whole profile (``shared.stringArray``, since 56), per-thread ``stackTable`` (``frame``,
``prefix``), ``frameTable``, ``funcTable`` (with ``fileName``), ``resourceTable`` and
``nativeSymbols``, and marker schemas with ``fields`` (since 55).

**Threads.** One per traced thread of every process of the sequence, processes in the order they
first ran, each thread's ``tid`` its native id, ``pid`` the process's OS pid as a string (with
``@host``, and the puid if need be, when two processes share it), ``processName`` what the
process runs (``--format otlp``'s ``service.name``); exactly one thread per process is its main
thread (the one whose native id is the pid, else the first).

**Markers.** Every measured call is an interval marker (``phase`` 1) on its thread, named by its
method, of type ``InvoseqCall`` (``meta.markerSchema``): its invocation id, status, exception,
and how it was reached (``handoff``, and ``queued``: the hand-off's queue wait). A call still
running lasts until the latest time the sequence shows.

**Samples.** Each stack sample is one row of its thread's samples table, ``weight`` the ticks it
stands for (``weightType`` ``samples``), so the weights add up to the sequence's sample weight.
Its stack is the sample's frames placed under the measured call it was taken under, as
``--format otlp-profiles`` links it (``views.samples.placement.place_sample``): the measured calls
of its thread from the outermost to that call (category ``Traced``), then the sampled frames
beneath it (category ``Python``). A sample no measured call holds keeps its whole stack.

**Idle stretches.** The sampler collapses N identical samples of an idle thread into one of weight N
standing for a duration D. Format 57 has no per-sample duration column: a sample is an instant, its
extent up to the thread's next sample, and a range selection counts the samples whose instant it
holds. So the stretch is spread back over its duration: ``min(N, SPREAD_LIMIT)`` samples at even
steps from its first instant, their weights adding up to N (1 each when N is at most the limit: the
ticks the sampler collapsed, one per interval), each placed under the measured call that holds its
instant (a stretch of no duration stays one sample); a selection of part of the stretch counts its
share of N, to a step. The stretch is also an interval marker ``idle: N samples`` (type
``InvoseqIdle``: ``weight`` N, ``duration`` D, ``cpu``) from its first instant to its end.

Times are milliseconds (floats, to the nanosecond) from ``meta.startTime``, the wall-clock time of
the sequence's first call or sample in milliseconds since the epoch. A sequence without samples is
exported with its markers and empty samples tables.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import msgspec

from cmr.store.base import FrameRecord, SampleRecord, SequenceData
from cmr.views.model import (
    KIND_MEASURED,
    UNKNOWN_THREAD,
    Node,
    SequenceTree,
    service_name,
    walk,
)
from cmr.views.render.firefox_tables import FuncKey, ThreadTables
from cmr.views.render.interned import Interned
from cmr.views.samples.merge import measured_calls
from cmr.views.samples.placement import place_sample
from cmr.views.samples.timeline import Call, ThreadCalls

#: The processed profile format version written, and the Gecko format version of the same
#: profiler release (``meta.version``; the profiler reads the processed version).
PROCESSED_PROFILE_VERSION: Final = 57
GECKO_PROFILE_VERSION: Final = 31
PRODUCT: Final = "invoseq"
#: ``meta.categories``: the first grey one is the default (the profiler requires one).
CATEGORIES: Final = (
    {"name": "Other", "color": "grey", "subcategories": ["Other"]},
    {"name": "Traced", "color": "blue", "subcategories": ["Other"]},
    {"name": "Python", "color": "yellow", "subcategories": ["Other"]},
    {"name": "Idle", "color": "transparent", "subcategories": ["Other"]},
)
OTHER, TRACED, PYTHON, IDLE = range(4)
CALL_MARKER: Final = "InvoseqCall"
IDLE_MARKER: Final = "InvoseqIdle"
#: The most samples one idle stretch is spread into (module docstring): a stretch of a minute at
#: 100 Hz is 1,000 samples of weight 6, a selection's share exact to 60 ms.
SPREAD_LIMIT: Final = 1000


def _schema(name: str, table: str, description: str, *fields: tuple[str, str, str]) -> Any:
    """A marker schema shown in the marker chart, the marker table and the timeline."""
    return {
        "name": name,
        "tooltipLabel": "{marker.name}",
        "tableLabel": "{marker.name} (" + table + ")",
        "chartLabel": "{marker.name}",
        "description": description,
        "display": ["marker-chart", "marker-table", "timeline-overview"],
        "fields": [{"key": k, "label": label, "format": f} for k, label, f in fields],
    }


MARKER_SCHEMA: Final = (
    _schema(
        CALL_MARKER,
        "{marker.data.status}",
        "A call the tracer measured (invoseq)",
        ("iid", "Invocation", "integer"),
        ("status", "Status", "string"),
        ("error", "Raised", "string"),
        ("handoff", "Reached by", "string"),
        ("queued", "Queue wait", "duration"),
    ),
    _schema(
        IDLE_MARKER,
        "{marker.data.duration}",
        "Identical samples of an idle thread, kept as one sample of this weight",
        ("weight", "Samples", "integer"),
        ("duration", "Duration", "duration"),
        ("cpu", "CPU time", "duration"),
    ),
)

ThreadKey = tuple[int, int]  # (puid, tid)
_encode = msgspec.json.Encoder().encode


def render_firefox(tree: SequenceTree, data: SequenceData) -> bytes:
    """The processed profile (module docstring) of ``tree`` and the samples of ``data``, the
    records ``tree`` was built from."""
    return _encode(to_firefox(tree, data))


def to_firefox(tree: SequenceTree, data: SequenceData) -> dict[str, Any]:
    """The profile as JSON-ready values (``render_firefox``)."""
    calls = [node for node, _depth in walk(tree.root) if node.kind == KIND_MEASURED]
    times = [node.start_ns for node in calls] + [sample.t_ns for sample in data.samples]
    origin = min(times, default=tree.root.start_ns)
    latest = max(
        [origin]
        + [node.end_ns for node in calls if node.end_ns is not None]
        + [node.start_ns for node in calls]
        + [sample.t_ns + sample.duration_ns for sample in data.samples]
    )
    strings = Interned()
    threads: dict[ThreadKey, ThreadTables] = {}

    def thread_of(key: ThreadKey) -> ThreadTables:
        found = threads.get(key)
        if found is None:
            found = threads[key] = ThreadTables(strings, origin)
        return found

    first: dict[ThreadKey, int] = {}
    for node in calls:
        key = (node.process.puid, node.thread.tid)
        first[key] = min(first.get(key, node.start_ns), node.start_ns)
        end = latest if node.end_ns is None else max(node.start_ns, node.end_ns)
        thread_of(key).marker(node.name, node.start_ns, end, TRACED, _call_data(node))
    on_threads = measured_calls(tree, data) if data.samples else {}
    for sample in data.samples:
        key = (sample.puid, sample.tid)
        first[key] = min(first.get(key, sample.t_ns), sample.t_ns)
        _add_sample(thread_of(key), sample, on_threads.get(key), data.frames)
    documents = _threads(threads, first, data)
    meta = _meta(origin, data)
    if documents:  # every thread shown, not only those the profiler finds busy enough
        meta["initialVisibleThreads"] = list(range(len(documents)))
        meta["initialSelectedThreads"] = [0]
    return {
        "meta": meta,
        "libs": [],
        "pages": [],
        "counters": [],
        "profilerOverhead": [],
        "threads": documents,
        "shared": {"stringArray": strings.table},
    }


def _call_data(node: Node) -> dict[str, Any]:
    data: dict[str, Any] = {"type": CALL_MARKER, "iid": node.iid, "status": node.status}
    if node.error is not None:
        data["error"] = node.error
    if node.handoff is not None:
        data["handoff"] = node.handoff.kind
        if node.handoff.queued_ns is not None:
            data["queued"] = node.handoff.queued_ns / 1e6
    return data


def _add_sample(
    thread: ThreadTables,
    sample: SampleRecord,
    calls: ThreadCalls | None,
    records: dict[tuple[int, int], FrameRecord],
) -> None:
    parts = spread(sample) if sample.weight > 1 and sample.duration_ns > 0 else [sample]
    for part in parts:  # a stretch of no duration (its ticks at one instant) stays whole
        thread.samples.append((part.t_ns, _stack(thread, part, calls, records), part.weight))
    if sample.weight == 1:
        return
    end = sample.t_ns + sample.duration_ns
    data = {
        "type": IDLE_MARKER,
        "weight": sample.weight,
        "duration": sample.duration_ns / 1e6,
        "cpu": sample.cpu_ns / 1e6,
    }
    thread.marker(f"idle: {sample.weight} samples", sample.t_ns, end, IDLE, data)


def spread(sample: SampleRecord, limit: int = SPREAD_LIMIT) -> list[SampleRecord]:
    """A collapsed sample as ``min(weight, limit)`` instants (duration 0) at even steps over its
    span, their weights adding up to its weight and differing by one at most."""
    parts = min(sample.weight, limit)
    found = []
    for i in range(parts):
        weight = (i + 1) * sample.weight // parts - i * sample.weight // parts
        cpu = (i + 1) * sample.cpu_ns // parts - i * sample.cpu_ns // parts
        at = sample.t_ns + i * sample.duration_ns // parts
        found.append(replace(sample, t_ns=at, weight=weight, duration_ns=0, cpu_ns=cpu))
    return found


def _stack(
    thread: ThreadTables,
    sample: SampleRecord,
    calls: ThreadCalls | None,
    records: dict[tuple[int, int], FrameRecord],
) -> int | None:
    """The stack of ``sample``: the measured calls of its thread down to the one it was taken
    under, then its frames beneath that call's own."""
    placements, _missed = place_sample(sample, calls, records) if calls else ([], 0)
    frames: list[tuple[FuncKey, int | None, int]] = []
    cut = -1
    if placements:
        placed = placements[0]  # an instant: one call holds it
        cut = placed.cut
        chain: list[Call] = []
        call: Call | None = placed.call
        while call is not None:
            chain.append(call)
            call = call.parent
        for measured in reversed(chain):
            file, line = measured.key if measured.key is not None else ("", None)
            frames.append(((measured.node.name, file, line), line, TRACED))
    for frame_id, line in list(zip(sample.frames, sample.lines, strict=True))[cut + 1 :]:
        record = records.get((sample.puid, frame_id))
        if record is None:
            frames.append(((f"<unknown frame {frame_id}>", "", None), line, PYTHON))
        else:
            frames.append(((record.function, record.file, record.line), line, PYTHON))
    return thread.stack(frames)


def _meta(origin: int, data: SequenceData) -> dict[str, Any]:
    ticks = [s.duration_ns / s.weight for s in data.samples if s.weight and s.duration_ns]
    return {
        "version": GECKO_PROFILE_VERSION,
        "preprocessedProfileVersion": PROCESSED_PROFILE_VERSION,
        "product": PRODUCT,
        "importedFrom": f"invoseq sequence {data.seq.hex()}",
        "startTime": origin / 1e6,
        "interval": min(ticks) / 1e6 if ticks else 1.0,
        "processType": 0,
        "stackwalk": 0,
        "debug": False,
        "symbolicated": True,
        "categories": list(CATEGORIES),
        "markerSchema": list(MARKER_SCHEMA),
        "usesOnlyOneStackType": True,
        "sourceCodeIsNotOnSearchfox": True,
    }


def _threads(
    threads: dict[ThreadKey, ThreadTables], first: dict[ThreadKey, int], data: SequenceData
) -> list[dict[str, Any]]:
    """The threads, grouped by process (processes by when they first ran), by serial tid."""
    starts: dict[int, int] = {}
    for (puid, _tid), at in first.items():
        starts[puid] = min(starts.get(puid, at), at)
    order = sorted(threads, key=lambda key: (starts[key[0]], key[0], key[1]))
    pids = _pids(list(starts), data)
    natives = {key: _native_id(key, data) for key in order}
    mains: dict[int, ThreadKey] = {}
    for key in order:
        process = data.processes.get(key[0])
        if process is not None and natives[key] == process.pid:
            mains.setdefault(key[0], key)
    for key in order:
        mains.setdefault(key[0], key)
    documents = []
    for key in order:
        puid = key[0]
        origin = threads[key].origin
        record = data.threads.get(key)
        process = data.processes.get(puid)
        documents.append(
            {
                "name": record.name if record is not None else UNKNOWN_THREAD,
                "tid": natives[key],
                "pid": pids[puid],
                "processName": service_name(process.argv) if process else f"{puid:x}",
                "processType": "default",
                "isMainThread": mains[puid] == key,
                "processStartupTime": (starts[puid] - origin) / 1e6,
                "processShutdownTime": None,
                "registerTime": (first[key] - origin) / 1e6,
                "unregisterTime": None,
                "pausedRanges": [],
                "showMarkersInTimeline": True,
                **threads[key].tables(),
            }
        )
    return documents


def _native_id(key: ThreadKey, data: SequenceData) -> int:
    record = data.threads.get(key)
    return record.native_id if record is not None and record.native_id else key[1]


def _pids(puids: list[int], data: SequenceData) -> dict[int, str]:
    """Each process's OS pid as a string; ``pid@host`` when two processes share a pid, and the
    puid too when they share the host as well (a reused pid)."""
    plain: dict[int, tuple[str, str]] = {}
    for puid in puids:
        process = data.processes.get(puid)
        plain[puid] = (str(process.pid), process.host) if process else (f"{puid:x}", "")
    pids = [pid for pid, _host in plain.values()]
    hosted = [f"{pid}@{host}" for pid, host in plain.values()]
    named: dict[int, str] = {}
    for puid, (pid, host) in plain.items():
        if pids.count(pid) == 1:
            named[puid] = pid
        elif hosted.count(f"{pid}@{host}") == 1:
            named[puid] = f"{pid}@{host}"
        else:
            named[puid] = f"{pid}@{host}#{puid:x}"
    return named

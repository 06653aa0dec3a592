"""A sequence's stack samples as OpenTelemetry profiles, each linked to the span it was taken
under: ``cmr export --format otlp-profiles`` and ``cmr forward --profiles``.

The document is an ``ExportProfilesServiceRequest`` of ``opentelemetry.proto.profiles.
v1development`` in OTLP/JSON (the encoding of ``cmr.otlp.render``: lowerCamelCase keys, 64-bit
integers as decimal strings, trace and span ids as lowercase hex, and so the profile id too, as
the OpenTelemetry Collector writes it). One ``resourceProfiles`` entry per process that has
samples, its resource the one ``--format otlp`` gives that process; in its ``invoseq`` scope two
profiles of the same samples: ``wall``/``nanoseconds`` (the time each sample stands for) and
``cpu``/``nanoseconds`` (the CPU time its thread used meanwhile). Everything they share is in the
request's ``dictionary``: strings, functions, locations (a frame and the line it was running),
stacks (leaf first), links and attributes, each table starting with its zero entry.

**Links.** A sample is placed as ``cmr show --samples`` places it
(``views.samples.merge.place_sample``: the innermost measured call of its thread holding its time,
whose frame is on the stack) and links (``linkIndex``) to that call's span: the trace id is the
sequence's and the span id the one ``--format otlp`` gives the call, so a backend holding both
finds the span of every sample. A sample no measured call of the sequence holds has no link.

**Samples as recorded.** The sampler collapses identical consecutive samples of an idle thread
into one of weight N standing for a duration. It stays one observation here (not N): its value
is the duration (wall) or the CPU time, its timestamp its first instant, and the attribute
``invoseq.sample.weight`` says how many ticks it stands for. One spanning several calls is cut
where they start and end, as the tree cuts it: an observation per call, each with its share of
the weight and of the times. Observations of the same stack, link and attributes are one
``Sample`` with a value and a timestamp each, in time order. ``thread.id`` (the native id) and
``thread.name`` are attributes of every sample.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from cmr.otlp.render import encode_attributes, span_id_hex
from cmr.otlp.spans import SCOPE_NAME, AttributeValue, Trace
from cmr.store.base import FrameRecord, SampleRecord, SequenceData
from cmr.views.model import SequenceTree
from cmr.views.samples.merge import measured_calls
from cmr.views.samples.placement import place_sample

#: The two profiles of every process: (sample type, unit).
WALL: Final = ("wall", "nanoseconds")
CPU: Final = ("cpu", "nanoseconds")
#: How many ticks of the sampler an observation stands for (a collapsed sample's N).
WEIGHT_ATTRIBUTE: Final = "invoseq.sample.weight"
_PERSON: Final = b"invoseq.profile"

_encode = msgspec.json.Encoder().encode


class _Table:
    """A dictionary table: its zero entry first (``{}``, or ``""`` for strings), each distinct
    entry once, by first use."""

    def __init__(self, zero: Any = None) -> None:
        self.entries: list[Any] = [{} if zero is None else zero]
        self._index: dict[Hashable, int] = {} if zero is None else {zero: 0}

    def index(self, key: Hashable, make: Any) -> int:
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.entries)
            self.entries.append(make())
        return found


@dataclass
class _Dictionary:
    strings: _Table = field(default_factory=lambda: _Table(""))
    functions: _Table = field(default_factory=_Table)
    locations: _Table = field(default_factory=_Table)
    stacks: _Table = field(default_factory=_Table)
    links: _Table = field(default_factory=_Table)
    attributes: _Table = field(default_factory=_Table)

    def string(self, text: str) -> int:
        return self.strings.index(text, lambda: text)

    def stack(self, sample: SampleRecord, frames: dict[tuple[int, int], FrameRecord]) -> int:
        locations = tuple(
            self._location(frames.get((sample.puid, frame)), frame, line)
            for frame, line in zip(reversed(sample.frames), reversed(sample.lines), strict=True)
        )
        return self.stacks.index(locations, lambda: {"locationIndices": list(locations)})

    def _location(self, record: FrameRecord | None, frame: int, line: int) -> int:
        if record is None:
            record = FrameRecord("", f"<unknown frame {frame}>", 0)
        function = self.functions.index(
            (record.function, record.file, record.line),
            lambda: _function(self, record),
        )
        return self.locations.index(
            (function, line), lambda: {"lines": [{"functionIndex": function, "line": str(line)}]}
        )

    def link(self, trace_id: str, span_id: int) -> int:
        return self.links.index(
            span_id, lambda: {"traceId": trace_id, "spanId": span_id_hex(span_id)}
        )

    def attribute(self, key: str, value: AttributeValue) -> int:
        [encoded] = encode_attributes({key: value})
        return self.attributes.index(
            (key, type(value), value),
            lambda: {"keyStrindex": self.string(key), "value": encoded["value"]},
        )

    def document(self) -> dict[str, Any]:
        return {
            "mappingTable": [{}],
            "locationTable": self.locations.entries,
            "functionTable": self.functions.entries,
            "linkTable": self.links.entries,
            "stringTable": self.strings.entries,
            "attributeTable": self.attributes.entries,
            "stackTable": self.stacks.entries,
        }


def _function(dictionary: _Dictionary, record: FrameRecord) -> dict[str, Any]:
    name = dictionary.string(record.function)
    return {
        "nameStrindex": name,
        "systemNameStrindex": name,
        "filenameStrindex": dictionary.string(record.file),
        "startLine": str(record.line),
    }


@dataclass
class _Series:
    """One ``Sample``: the observations of a stack, link and attributes."""

    stack: int
    link: int
    attributes: list[int]
    points: list[tuple[int, int, int]] = field(default_factory=list)  # (time, wall, cpu)


def to_profiles(tree: SequenceTree, data: SequenceData, trace: Trace) -> dict[str, Any] | None:
    """The ``ExportProfilesServiceRequest`` of ``data``'s samples (module docstring), linked to
    ``trace`` (``spans.to_trace(tree, data)``); None when the sequence has no samples."""
    if not data.samples:
        return None
    threads = measured_calls(tree, data)
    trace_id = trace.trace_id.hex()
    dictionary = _Dictionary()
    series: dict[int, dict[tuple[int, int, tuple[int, ...]], _Series]] = {}
    for sample in data.samples:
        thread = threads.get((sample.puid, sample.tid))
        placements, _skipped = place_sample(sample, thread, data.frames) if thread else ([], 0)
        pieces = [
            (trace.measured.get((p.call.node.process.puid, p.call.node.iid)), p.count, p.start,
             p.time, p.cpu)
            for p in placements
        ]  # fmt: skip
        if not pieces:  # held by no measured call here: kept, without a link
            pieces = [(None, sample.weight, sample.t_ns, sample.duration_ns, sample.cpu_ns)]
        stack = dictionary.stack(sample, data.frames)
        thread_attributes = _thread_attributes(dictionary, data, sample)
        by_process = series.setdefault(sample.puid, {})
        for span_id, count, start, time, cpu in pieces:
            link = 0 if span_id is None else dictionary.link(trace_id, span_id)
            attributes = (*thread_attributes, dictionary.attribute(WEIGHT_ATTRIBUTE, count))
            key = (stack, link, attributes)
            found = by_process.get(key)
            if found is None:
                found = by_process[key] = _Series(stack, link, list(attributes))
            found.points.append((start, time, cpu))
    version = trace.scope_version
    resource_profiles = [
        {
            "resource": {"attributes": encode_attributes(_resource(trace, puid))},
            "scopeProfiles": [
                {
                    "scope": {"name": SCOPE_NAME, "version": version},
                    "profiles": [
                        _profile(dictionary, data.seq, puid, kind, list(by_key.values()))
                        for kind in (WALL, CPU)
                    ],
                }
            ],
        }
        for puid, by_key in sorted(series.items())
    ]
    return {"resourceProfiles": resource_profiles, "dictionary": dictionary.document()}


def render_profiles(document: dict[str, Any]) -> bytes:
    return _encode(document)


def profile_id(seq: bytes, puid: int, kind: str) -> bytes:
    """A profile's id: derived, so exporting twice gives the same ids (16 bytes)."""
    digest = hashlib.blake2b(digest_size=16, person=_PERSON)
    digest.update(seq + puid.to_bytes(8, "big") + kind.encode())
    return digest.digest()


def _resource(trace: Trace, puid: int) -> dict[str, AttributeValue]:
    resource = trace.resource_of.get(puid)
    return dict(resource.attributes) if resource is not None else {"invoseq.puid": puid}


def _thread_attributes(
    dictionary: _Dictionary, data: SequenceData, sample: SampleRecord
) -> tuple[int, ...]:
    thread = data.threads.get((sample.puid, sample.tid))
    if thread is None:
        return ()
    return (
        dictionary.attribute("thread.id", thread.native_id),
        dictionary.attribute("thread.name", thread.name),
    )


def _profile(
    dictionary: _Dictionary,
    seq: bytes,
    puid: int,
    kind: tuple[str, str],
    series: list[_Series],
) -> dict[str, Any]:
    value = 1 if kind == WALL else 2
    first = min(point[0] for one in series for point in one.points)
    last = max(point[0] + point[1] for one in series for point in one.points)
    samples = []
    for one in series:
        points = sorted(one.points)
        sample: dict[str, Any] = {"stackIndex": one.stack}
        if one.attributes:
            sample["attributeIndices"] = one.attributes
        if one.link:
            sample["linkIndex"] = one.link
        sample["values"] = [str(point[value]) for point in points]
        sample["timestampsUnixNano"] = [str(point[0]) for point in points]
        samples.append(sample)
    return {
        "sampleType": {
            "typeStrindex": dictionary.string(kind[0]),
            "unitStrindex": dictionary.string(kind[1]),
        },
        "samples": samples,
        "timeUnixNano": str(first),
        "durationNano": str(max(0, last - first)),
        "profileId": profile_id(seq, puid, kind[0]).hex(),
    }

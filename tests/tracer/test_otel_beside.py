"""The OpenTelemetry SDK beside the tracer: a program makes spans with the SDK's TracerProvider
(an in-memory exporter) around and inside traced functions. Its spans come out exactly as they
do untraced (names, trace ids, span ids, parents, kinds, attributes, status; the ids drawn from
a counter, so that two runs can be compared), with or without ``InvocationSpanProcessor`` added
to the provider, and the tracer's trees are whole: the root call made inside a span adopts that
span's trace id as its sequence (docs/guide.md, "OpenTelemetry spans and traces in one tree").

Each program is a real process sending to a real ``cmr serve``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.processes.stored import sequences, tree
from tests.support import cmr_server, run_program, shape, traced_env, write_script

pytestmark = pytest.mark.system

#: ``python spans.py plain|traced|processor``: the same program untraced, with ``@traced``
#: functions, and with ``InvocationSpanProcessor`` added too. Prints the finished spans.
PROGRAM = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

MODE = sys.argv[1]
if MODE == "plain":
    traced = lambda f: f
else:
    import tracer
    traced = tracer.traced

class Counting(IdGenerator):
    def __init__(self):
        self.n = 0

    def generate_span_id(self):
        self.n += 1
        return self.n

    def generate_trace_id(self):
        self.n += 1
        return 0x5EED << 64 | self.n

exporter = InMemorySpanExporter()
provider = TracerProvider(id_generator=Counting())
provider.add_span_processor(SimpleSpanProcessor(exporter))
if MODE == "processor":
    from tracer.otel import InvocationSpanProcessor
    provider.add_span_processor(InvocationSpanProcessor())
otel = provider.get_tracer("beside")

@traced
def fetch(sql):
    with otel.start_as_current_span("db.fetch"):
        return len(sql)

@traced
def query(sql):
    with otel.start_as_current_span("db.query", attributes={"db.statement": sql}):
        return fetch(sql)

@traced
def handle(n):
    return sum(query(f"select {i}") for i in range(n))

with otel.start_as_current_span("request", kind=trace.SpanKind.SERVER):
    handle(2)
handle(1)  # outside any span
try:
    with otel.start_as_current_span("failing"):
        handle(-1) or 1 / 0
except ZeroDivisionError:
    pass
assert trace.get_current_span() is trace.INVALID_SPAN
if MODE != "plain":
    tracer.shutdown(30)

def parent(span):
    return None if span.parent is None else f"{span.parent.span_id:x}"

print(json.dumps([
    {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:x}",
        "parent": parent(span),
        "kind": span.kind.name,
        "attributes": dict(span.attributes),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }
    for span in exporter.get_finished_spans()
]))
"""


def run(tmp_path: Path, endpoint: str, mode: str) -> list[dict[str, Any]]:
    script = write_script(tmp_path / "spans.py", PROGRAM)
    result = run_program([sys.executable, str(script), mode], env=traced_env(endpoint))
    assert result.returncode == 0, result.stderr
    spans: list[dict[str, Any]] = json.loads(result.stdout)
    return spans


def trace_of(n: int) -> str:
    return f"{0x5EED << 64 | n:032x}"


#: The spans untraced: ``request`` with two ``db.query`` (each with its ``db.fetch``) in one
#: trace; outside any span, one trace per ``db.query``; ``failing`` ends in error. Finished
#: spans come innermost first. Trace ids are drawn before span ids: trace 1 has span 2, and so on.
UNTRACED = [
    {"name": "db.fetch", "trace_id": trace_of(1), "span_id": "4", "parent": "3"},
    {"name": "db.query", "trace_id": trace_of(1), "span_id": "3", "parent": "2"},
    {"name": "db.fetch", "trace_id": trace_of(1), "span_id": "6", "parent": "5"},
    {"name": "db.query", "trace_id": trace_of(1), "span_id": "5", "parent": "2"},
    {"name": "request", "trace_id": trace_of(1), "span_id": "2", "parent": None},
    {"name": "db.fetch", "trace_id": trace_of(7), "span_id": "9", "parent": "8"},
    {"name": "db.query", "trace_id": trace_of(7), "span_id": "8", "parent": None},
    {"name": "failing", "trace_id": trace_of(10), "span_id": "b", "parent": None},
]


@pytest.mark.parametrize("mode", ["traced", "processor"])
def test_otel_spans_are_the_same_beside_the_tracer_and_its_trees_are_whole(
    tmp_path: Path, mode: str
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        plain = run(tmp_path, endpoint, "plain")
        assert [
            {k: span[k] for k in ("name", "trace_id", "span_id", "parent")} for span in plain
        ] == UNTRACED
        assert [(s["kind"], s["status"]) for s in plain[4:]] == [
            ("SERVER", "UNSET"), ("INTERNAL", "UNSET"), ("INTERNAL", "UNSET"), ("INTERNAL", "ERROR")
        ]  # fmt: skip
        assert run(tmp_path, endpoint, mode) == plain
    db = tmp_path / "cmr.sqlite"
    trees = {summary["seq"]: shape(tree(db, summary["seq"])) for summary in sequences(db)}
    fetch = {"name": "__main__.fetch", "status": "ok"}
    query = {"name": "__main__.query", "status": "ok", "children": [fetch]}
    if mode == "processor":  # the spans as nodes: a call and the span it made are siblings
        fetch["children"] = [{"name": "beside.db.fetch", "status": "ok"}]
        query["children"] = [{"name": "beside.db.query", "status": "ok"}, fetch]
    handle = {"name": "__main__.handle", "status": "ok"}
    # The root call inside ``request`` adopted its trace; the one outside any span has an id
    # of its own (with the processor, the span is the root: the sequence adopts its trace).
    remote = {"name": "<remote parent>", "status": "ok"}  # the span, the sequence's parent
    twice = {**handle, "children": [query, query]}
    expected = {
        trace_of(1): {**remote, "children": [twice]},
        trace_of(10): {**remote, "children": [handle]},
    }
    if mode == "processor":
        failing = {"name": "beside.failing", "status": "error", "error": "ZeroDivisionError"}
        expected = {
            trace_of(1): {"name": "beside.request", "status": "ok", "children": [twice]},
            trace_of(10): {**failing, "children": [handle]},
        }
    alone = [seq for seq in trees if seq not in expected]
    assert len(alone) == 1
    assert trees == {**expected, alone[0]: {**handle, "children": [query]}}

"""`cmr export --format otlp`: a traced program's sequence as OTLP/JSON traces that the
opentelemetry-proto message definitions read, one span per call of the tree `cmr show` prints."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from cmr.cli import main
from cmr.store import open_store
from cmr.views.model import service_name
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, make_batch
from tests.cmr.export_support import MS, SEQ, STOCK, fill
from tests.cmr.otlp_support import attributes, otlp_json_to_request, otlp_receiver, record_shop
from tests.support import cmr, cmr_json

KIND_INTERNAL = 1
KIND_SERVER = 2
STATUS_ERROR = 2
FLAGS_LOCAL_PARENT = 0x100
FLAGS_REMOTE_PARENT = 0x300


@pytest.fixture(name="shop", scope="module")
def fixture_shop(tmp_path_factory) -> tuple[Path, str]:
    """One real traced run, shared by this module's tests: it costs a few seconds."""
    return record_shop(tmp_path_factory.mktemp("shop"))


class Spans:
    """A parsed export: spans by id, each with its resource's attributes and its own."""

    def __init__(self, request: Any) -> None:
        self.request = request
        self.by_id: dict[bytes, Any] = {}
        self.resource_of: dict[bytes, dict[str, Any]] = {}
        self.children: dict[bytes, list[Any]] = {}
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == "invoseq"
                for span in scope_spans.spans:
                    assert span.span_id not in self.by_id, "span ids are unique"
                    self.by_id[span.span_id] = span
                    self.resource_of[span.span_id] = resource
                    self.children.setdefault(span.parent_span_id, []).append(span)

    def attrs(self, span: Any) -> dict[str, Any]:
        return attributes(span.attributes)

    def key(self, span: Any) -> tuple[Any, ...]:
        own = self.attrs(span)
        return (
            span.name,
            span.start_time_unix_nano,
            self.resource_of[span.span_id].get("invoseq.puid"),
            own.get("invoseq.tid"),
            own.get("invoseq.estimated", False),
        )


def node_key(node: dict[str, Any]) -> tuple[Any, ...]:
    return (
        node["name"],
        node["start_ns"],
        node["process"]["puid"],
        node["thread"]["tid"],
        node["kind"] == "estimated",
    )


def walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    nodes, stack = [], [node]
    while stack:
        nodes.append(stack.pop())
        stack.extend(nodes[-1]["children"])
    return nodes


def pair_up(root: dict[str, Any], spans: Spans) -> list[tuple[dict[str, Any], Any, Any]]:
    """(node, span, parent span) for every node of a `cmr show --json` tree, matched level by
    level: a node's children and its span's children must be the same calls."""
    [top] = spans.children[b""]
    assert spans.key(top) == node_key(root)
    pairs = [(root, top, None)]
    queue = [(root, top)]
    while queue:
        node, span = queue.pop()
        kids = sorted(node["children"], key=node_key)
        kid_spans = sorted(spans.children.get(span.span_id, []), key=spans.key)
        assert [node_key(kid) for kid in kids] == [spans.key(s) for s in kid_spans]
        for kid, kid_span in zip(kids, kid_spans, strict=True):
            pairs.append((kid, kid_span, span))
            queue.append((kid, kid_span))
    return pairs


def span_id(puid: int, iid: int) -> bytes:
    """The derivation docs/protocol.md documents for a measured call."""
    material = puid.to_bytes(8, "big") + iid.to_bytes(8, "big")
    return hashlib.blake2b(material, digest_size=8, person=b"invoseq.span").digest()


@pytest.mark.system
def test_the_export_parses_with_the_opentelemetry_proto_definitions(shop) -> None:
    db, seq = shop
    request = otlp_json_to_request(cmr(db, "export", seq[:8], "--format", "otlp").stdout)

    processes = {
        p["puid"]: p for p in (n["process"] for n in walk(cmr_json(db, "show", seq)["root"]))
    }
    assert len(processes) == 2  # the program and its forked child
    assert len(request.resource_spans) == 2
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        process = processes[resource["invoseq.puid"]]
        assert resource["process.pid"] == process["pid"]
        assert resource["host.name"] == process["host"]
        assert resource["service.name"] == "shop"
        for span in resource_spans.scope_spans[0].spans:
            assert span.trace_id == bytes.fromhex(seq)
            assert len(span.span_id) == 8
            assert span.span_id != bytes(8)


@pytest.mark.system
def test_every_call_is_one_span_with_the_trees_ids_parents_and_times(shop) -> None:
    db, seq = shop
    spans = Spans(otlp_json_to_request(cmr(db, "export", seq, "--format", "otlp").stdout))
    root = cmr_json(db, "show", seq, "--samples")["root"]

    pairs = pair_up(root, spans)

    assert len(pairs) == len(walk(root)) == len(spans.by_id)
    kinds = {node["kind"] for node, _, _ in pairs}
    assert kinds == {"measured", "estimated"}, "the sampler saw spin() below price()"
    for node, span, parent in pairs:
        own = spans.attrs(span)
        resource = spans.resource_of[span.span_id]
        assert span.start_time_unix_nano == node["start_ns"]
        assert span.end_time_unix_nano == node["end_ns"]
        assert span.parent_span_id == (b"" if parent is None else parent.span_id)
        assert own["thread.name"] == node["thread"]["name"]
        if node["kind"] == "measured":
            assert span_id(resource["invoseq.puid"], own["invoseq.iid"]) == span.span_id
            assert "invoseq.estimated" not in own
            assert own["code.namespace"] == "__main__"
            assert f"__main__.{own['code.function']}" == node["name"]
        else:
            assert own["invoseq.estimated"] is True
            assert own["code.filepath"] == node["frame"]["file"]
            assert own["invoseq.estimated_duration_ns"] == node["duration_ns"]
        if node["handoff"] is not None:
            assert own["invoseq.handoff.kind"] == node["handoff"]["kind"]
            assert own["invoseq.handoff.queued_ns"] == node["handoff"]["queued_ns"]
        crossed = parent is not None and spans.resource_of[parent.span_id] != resource
        assert span.flags == (FLAGS_REMOTE_PARENT if crossed else FLAGS_LOCAL_PARENT)


@pytest.mark.system
def test_hand_offs_and_errors_are_spans_of_their_own_kind(shop) -> None:
    db, seq = shop
    spans = Spans(otlp_json_to_request(cmr(db, "export", seq, "--format", "otlp").stdout))
    [checkout] = spans.children[b""]
    by_name: dict[str, list[Any]] = {}
    for span in spans.children[checkout.span_id]:
        by_name.setdefault(span.name, []).append(span)

    assert len(by_name["__main__.price"]) == 3
    threads = {spans.attrs(s)["thread.name"] for s in by_name["__main__.price"]}
    assert all(name.startswith("ThreadPoolExecutor") for name in threads)
    assert {spans.attrs(s)["invoseq.handoff.kind"] for s in by_name["__main__.price"]} == {"thread"}
    [reserve] = by_name["__main__.reserve"]
    assert spans.attrs(reserve)["invoseq.handoff.kind"] == "process"
    assert spans.resource_of[reserve.span_id] != spans.resource_of[checkout.span_id]
    [audit] = by_name["__main__.audit"]
    assert audit.status.code == STATUS_ERROR
    assert audit.status.message == "ValueError"
    [event] = audit.events
    assert (event.name, attributes(event.attributes)) == (
        "exception",
        {"exception.type": "ValueError"},
    )
    assert event.time_unix_nano == audit.end_time_unix_nano
    assert checkout.status.code == 0
    assert all(span.kind == KIND_INTERNAL for span in spans.by_id.values())


@pytest.mark.system
def test_exporting_again_gives_the_same_ids(shop) -> None:
    """Span ids are derived, not drawn: a sequence sent twice is the same spans, not new ones.
    (Not the same bytes: a process's state, say alive then lost, is read at export time.)"""
    db, seq = shop

    def identities() -> list[tuple[bytes, bytes, str, int, int]]:
        spans = Spans(otlp_json_to_request(cmr(db, "export", seq, "--format", "otlp").stdout))
        return [
            (s.span_id, s.parent_span_id, s.name, s.start_time_unix_nano, s.end_time_unix_nano)
            for s in spans.by_id.values()
        ]

    assert identities() == identities()


@pytest.mark.system
def test_forward_delivers_the_spans_the_export_writes(shop, capsys) -> None:
    db, seq = shop
    exported = Spans(otlp_json_to_request(cmr(db, "export", seq, "--format", "otlp").stdout))
    with otlp_receiver() as receiver:
        code = main(["--db", str(db), "forward", "--otlp-endpoint", receiver.url, seq])
        received = receiver.spans()
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out == (
        f"forwarded 1 sequence ({len(exported.by_id)} spans) to {receiver.url}/v1/traces "
        "in 1 request\n"
    )
    assert len(received) == len(exported.by_id)

    def lasting(resource: dict[str, object]) -> dict[str, object]:
        """A resource's attributes but the process's state, which is read at each command: the
        program may pass from alive to lost between the export and the forward."""
        return {k: v for k, v in resource.items() if k != "invoseq.process.state"}

    for resource, span in received:
        assert span == exported.by_id[span.span_id]
        forwarded = attributes(resource.attributes)
        assert "invoseq.process.state" in forwarded
        assert lasting(forwarded) == lasting(exported.resource_of[span.span_id])


# -- the edges of a tree, on sequences written by hand ---------------------------------------------


def export_json(store_path: str, seq: bytes, capsys) -> Spans:
    assert main(["--db", store_path, "export", seq.hex(), "--format", "otlp"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return Spans(otlp_json_to_request(out))


def stored(tmp_path: Path, *batches: wire.Batch) -> str:
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        for batch in batches:
            assert store.ingest(batch, CLOCK_OFFSET_NS + 100 * MS)
    finally:
        store.close()
    return path


def test_a_call_that_never_ended_lasts_until_its_caller_ended_and_says_why(tmp_path, capsys):
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        fill(store)
    finally:
        store.close()
    spans = export_json(path, SEQ, capsys)
    [lock] = [s for s in spans.by_id.values() if s.name == "stock.lock"]
    [reserve] = [s for s in spans.by_id.values() if s.name == "stock.reserve"]
    own = spans.attrs(lock)
    assert lock.end_time_unix_nano == reserve.end_time_unix_nano == CLOCK_OFFSET_NS + 15 * MS
    assert own["invoseq.status"] == "incomplete"
    assert own["invoseq.incomplete"] is True
    assert spans.resource_of[lock.span_id]["invoseq.puid"] == STOCK
    assert spans.resource_of[lock.span_id]["invoseq.process.state"] == "lost"


def test_a_foreign_callers_span_is_the_remote_parent(tmp_path, capsys) -> None:
    """A sequence another tracing system started: the entry call hangs under the caller's span
    id (the traceparent's parent-id), so it joins that system's trace."""
    seq = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    foreign = 0x00F067AA0BA902B7
    events = [
        wire.Start(1, 0, foreign, 1, 0, seq),
        wire.Start(2, 1, 0, 2, 1 * MS, seq),
        wire.End(2, 2 * MS),
        wire.End(1, 3 * MS),
    ]
    path = stored(tmp_path, make_batch(0x51, 1, {1: events}, final=True))
    spans = export_json(path, seq, capsys)

    assert [span.name for span in spans.by_id.values()] == ["app.m1", "app.m2"]
    [entry] = spans.children[foreign.to_bytes(8, "big")]
    assert entry.name == "app.m1"
    assert (entry.kind, entry.flags) == (KIND_SERVER, FLAGS_REMOTE_PARENT)
    assert spans.attrs(entry)["invoseq.handoff.kind"] == "remote"
    [inner] = spans.children[entry.span_id]
    assert (inner.name, inner.kind, inner.flags) == ("app.m2", KIND_INTERNAL, FLAGS_LOCAL_PARENT)


def test_lost_events_leave_an_unknown_root_span_holding_the_orphans(tmp_path, capsys) -> None:
    seq = bytes.fromhex("00000000000000000000000000000bad")
    events = [wire.Start(2, 1, 0, 2, 1 * MS, seq), wire.End(2, 2 * MS)]  # iid 1 never arrived
    path = stored(tmp_path, make_batch(0x52, 1, {1: events}, final=True))
    spans = export_json(path, seq, capsys)

    [root] = spans.children[b""]
    assert root.name == "<unknown root>"
    assert spans.resource_of[root.span_id] == {"service.name": "invoseq", "invoseq.synthetic": True}
    [orphan] = spans.children[root.span_id]
    assert orphan.name == "app.m2"
    assert orphan.flags == FLAGS_LOCAL_PARENT
    assert (root.start_time_unix_nano, root.end_time_unix_nano) == (
        orphan.start_time_unix_nano,
        orphan.end_time_unix_nano,
    )


def test_invocation_attributes_become_span_attributes(capsys) -> None:
    """Attributes recorded for a call (an OpenTelemetry span's, through the bridge) are the
    span's; invoseq's own facts win a clash."""
    from cmr.exports import export_sequence

    seq = bytes.fromhex("000000000000000000000000000a7754")
    events = [
        wire.Start(1, 0, 0, 1, 0, seq),
        wire.Attrs(1, {"http.route": "/cart", "http.status_code": 200, "ratio": 0.5}),
        wire.Attrs(1, {"cached": True, "invoseq.status": "forged"}),
        wire.End(1, 1 * MS),
    ]
    store = open_store(memory=True)
    try:
        store.ingest(make_batch(0x53, 1, {1: events}, final=True), CLOCK_OFFSET_NS)
        text = export_sequence(store.load_sequence(seq), "otlp").decode()
    finally:
        store.close()
    [(_, span)] = [
        (resource, span)
        for resource in otlp_json_to_request(text).resource_spans
        for span in resource.scope_spans[0].spans
    ]
    own = attributes(span.attributes)
    assert own["http.route"] == "/cart"
    assert own["http.status_code"] == 200
    assert own["ratio"] == 0.5
    assert own["cached"] is True
    assert own["invoseq.status"] == "ok"


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (("/srv/shop/app.py", "--port", "80"), "app"),
        (("/srv/shop/__main__.py",), "shop"),
        (("-c",), "python"),
        (("-m", "shop.app", "--port", "80"), "shop.app"),  # tracer run -m shop.app
        ((), "python"),
        (("/usr/bin/gunicorn", "shop:app"), "gunicorn"),
    ],
)
def test_the_service_name_is_the_program_a_process_ran(argv, name) -> None:
    assert service_name(argv) == name


def test_the_export_is_utf8_json_with_hex_ids(tmp_path, capsys) -> None:
    """OTLP/JSON spells ids as hex, not protobuf's base64, and 64-bit integers as strings."""
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        fill(store)
    finally:
        store.close()
    assert main(["--db", path, "export", SEQ.hex(), "--format", "otlp"]) == 0
    document = json.loads(capsys.readouterr().out)
    span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == SEQ.hex()
    assert len(span["spanId"]) == 16
    assert int(span["spanId"], 16)
    assert span["startTimeUnixNano"] == str(CLOCK_OFFSET_NS)
    assert span["kind"] == KIND_INTERNAL


def test_the_document_written_a_chunk_of_spans_at_a_time_is_the_whole_documents_json() -> None:
    """A million spans are encoded a chunk at a time (their objects never all exist): the bytes
    are those of the whole document encoded at once, across resources and chunk boundaries."""
    from cmr.otlp.render import SPANS_PER_CHUNK, _span, encode_attributes, render_otlp
    from cmr.otlp.spans import KIND_INTERNAL as INTERNAL
    from cmr.otlp.spans import Resource, Span, Trace

    def spans(count: int, first_id: int) -> list[Span]:
        return [
            Span(
                first_id + i,
                first_id + i - 1 if i else 0,
                i == 0,
                f"f{i}",
                INTERNAL,
                i,
                i + 1,
                {"n": i, "even": i % 2 == 0, "share": i / 7},
                None if i % 3 else "ValueError",
            )
            for i in range(count)
        ]

    counts = (SPANS_PER_CHUNK * 2 + 3, 0, 1, SPANS_PER_CHUNK)
    resources = [
        Resource({"service.name": f"s{n}", "invoseq.puid": n}, spans(count, 1 + n * 10_000))
        for n, count in enumerate(counts)
    ]
    trace = Trace(SEQ, resources, "0.1.0")
    whole = {
        "resourceSpans": [
            {
                "resource": {"attributes": encode_attributes(resource.attributes)},
                "scopeSpans": [
                    {
                        "scope": {"name": "invoseq", "version": "0.1.0"},
                        "spans": [_span(span, SEQ.hex()) for span in resource.spans],
                    }
                ],
            }
            for resource in resources
        ]
    }
    assert render_otlp(trace) == json.dumps(whole, separators=(",", ":")).encode()
    assert render_otlp(Trace(SEQ, [], "0.1.0")) == b'{"resourceSpans":[]}'

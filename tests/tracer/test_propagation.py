"""W3C Trace Context headers: a sequence continues across processes and services.

Spec references (§) are to W3C Trace Context Level 2, https://www.w3.org/TR/trace-context-2/.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator

import tracer
from invoseq import wire
from tests.support import cmr_json, cmr_server, run_traced, shape, write_script
from tracer import propagation
from tracer._core import ids
from tracer.propagation import InvoseqPropagator, parse_traceparent, parse_tracestate
from tracer.testing import Capture, capture

M = __name__ + "."
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"  # the spec's own example (§3.2.3)
PARENT_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with capture() as trace:
        yield trace


def events(trace: Capture, kind: type[wire.Start] | type[wire.Handoff]) -> list[object]:
    trace.flush()
    return [
        event
        for batch in trace.batches
        for chunk in batch.chunks
        for event in chunk.events
        if isinstance(event, kind)
    ]


def handoffs(trace: Capture) -> list[wire.Handoff]:
    return [e for e in events(trace, wire.Handoff) if isinstance(e, wire.Handoff)]


def method_names(trace: Capture) -> dict[int, str]:
    return {m.method: m.qualname for batch in trace.batches for m in batch.methods}


@tracer.traced
def checkout(outgoing: dict[str, str]) -> bool:
    return tracer.inject(outgoing, name="POST /pay")


@tracer.traced
def pay() -> str | None:
    return tracer.current_sequence()


def serve(headers: dict[str, str]) -> str | None:
    with tracer.continue_from(headers):
        return pay()


# -- round trips -----------------------------------------------------------------------------------


def test_a_served_call_continues_the_sequence_under_the_injected_hand_off(trace: Capture) -> None:
    headers: dict[str, str] = {}
    assert checkout(headers)
    served_in = serve(headers)
    client, server = trace.invocations()
    assert (client.name, server.name) == (M + "checkout", M + "pay")
    assert server.seq == client.seq == served_in
    assert (server.handoff, server.parent) == ("remote", client.iid)
    (hop,) = handoffs(trace)
    names = method_names(trace)
    assert (hop.kind, hop.parent, names[hop.method]) == ("remote", client.iid, "POST /pay")
    assert headers["traceparent"] == f"00-{client.seq}-{hop.hid:016x}-03"
    assert dict(parse_tracestate(headers["tracestate"]) or ()) == {
        "invoseq": f"{ids.identity().puid:x}"
    }


@tracer.traced
def handle_order() -> str:
    return tracer.current_sequence() or ""


class OrderHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        with tracer.continue_from(self.headers):  # an http.client.HTTPMessage
            body = handle_order().encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(name="order_service")
def _order_service() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), OrderHandler)
    thread = threading.Thread(target=server.serve_forever, name="order-service")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/orders"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)


NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, headers: dict[str, str]) -> str:
    with NO_PROXY.open(urllib.request.Request(url, headers=headers), timeout=30) as response:
        return str(response.read().decode())


@tracer.traced
def place_order(url: str) -> str:
    headers: dict[str, str] = {}
    tracer.inject(headers, name="GET /orders")
    return get(url, headers)  # urllib sends the names capitalised: "Traceparent"


@pytest.mark.system
def test_over_real_http_the_service_joins_the_callers_sequence(
    trace: Capture, order_service: str
) -> None:
    served_in = place_order(order_service)
    unrelated = get(order_service, {})  # no headers: the service starts a sequence of its own
    assert trace.trees(strip=M) == [
        {"name": "place_order", "children": [{"name": "handle_order", "handoff": "remote"}]},
        {"name": "handle_order"},
    ]
    client, served, alone = trace.invocations()
    assert served.thread_name == alone.thread_name == "order-service"
    assert served_in == served.seq == client.seq
    assert unrelated == alone.seq != client.seq


@tracer.traced
def fan_out() -> list[dict[str, str]]:
    carriers: list[dict[str, str]] = [{}, {}, {}]
    for carrier in carriers:
        assert tracer.inject(carrier)
    return carriers


def test_every_inject_mints_a_fresh_hand_off(trace: Capture) -> None:
    carriers = fan_out()
    (root,) = trace.invocations()
    parsed = [parse_traceparent(c["traceparent"]) for c in carriers]
    assert {p.trace_id.hex() for p in parsed if p} == {root.seq}
    hids = [p.parent_id for p in parsed if p]
    assert len(set(hids)) == 3
    assert [(h.hid, h.parent, h.kind) for h in handoffs(trace)] == [
        (hid, root.iid, "remote") for hid in hids
    ]
    assert set(method_names(trace).values()) >= {"<remote call>"}


def test_inject_outside_a_sequence_writes_nothing(trace: Capture) -> None:
    carrier = {"tracestate": "congo=t61rcWkgMzE"}
    assert tracer.inject(carrier) is False
    assert propagation.inject_env(carrier) is False
    InvoseqPropagator().inject(carrier)
    assert carrier == {"tracestate": "congo=t61rcWkgMzE"}
    assert handoffs(trace) == []


def test_an_unknown_hand_off_kind_is_a_clear_error() -> None:
    expected = r"^hand-off kind must be one of thread, task, process, remote: 'rpc'$"
    with pytest.raises(ValueError, match=expected):
        tracer.inject({}, kind="rpc")  # the repository would reject the batch carrying it


# -- continuing a sequence -------------------------------------------------------------------------


@tracer.traced
def ship() -> str | None:
    return pack()


@tracer.traced
def pack() -> str | None:
    return tracer.current_sequence()


def test_a_foreign_traceparent_joins_its_trace_id_as_the_sequence(trace: Capture) -> None:
    with tracer.continue_from({"traceparent": VALID}) as value:
        assert ship() == TRACE_ID
    assert value == (bytes.fromhex(TRACE_ID), 0, int(PARENT_ID, 16))
    assert trace.trees(strip=M) == [{"name": "ship", "children": [{"name": "pack"}]}]
    starts = [e for e in events(trace, wire.Start) if isinstance(e, wire.Start)]
    assert [(s.seq.hex(), s.hid) for s in starts] == [(TRACE_ID, int(PARENT_ID, 16)), (TRACE_ID, 0)]


def test_an_invalid_traceparent_starts_a_new_sequence(trace: Capture) -> None:
    with tracer.continue_from({"traceparent": f"00-{'0' * 32}-{PARENT_ID}-01"}) as value:
        seq = ship()
    assert value is None
    assert seq is not None
    first = trace.invocations()[0]
    assert (first.seq, first.parent, first.handoff) == (seq, 0, None)


def fail_in_remote_sequence(headers: dict[str, str]) -> None:
    with tracer.continue_from(headers):
        assert tracer.current_sequence() == TRACE_ID
        raise ZeroDivisionError


@tracer.traced
def handler_that_fails(headers: dict[str, str]) -> tuple[str | None, str | None]:
    before = tracer.current_sequence()
    with pytest.raises(ZeroDivisionError):
        fail_in_remote_sequence(headers)
    return before, tracer.current_sequence()


def test_the_previous_context_is_restored_after_the_block_even_on_error(trace: Capture) -> None:
    before, after = handler_that_fails({"traceparent": VALID})
    assert before == after != TRACE_ID
    assert tracer.current_sequence() is None


# -- OpenTelemetry ---------------------------------------------------------------------------------


@tracer.traced
def call_through(otel: CompositePropagator) -> dict[str, str]:
    carrier: dict[str, str] = {}
    otel.inject(carrier)
    return carrier


def test_the_propagator_round_trips_through_a_composite_propagator(trace: Capture) -> None:
    otel = CompositePropagator([InvoseqPropagator(), W3CBaggagePropagator()])
    assert {"traceparent", "tracestate"} <= otel.fields
    carrier = call_through(otel)
    assert set(carrier) == {"traceparent", "tracestate"}
    received = otel.extract({name.title(): value for name, value in carrier.items()})
    value = propagation.from_otel_context(received)
    assert value is not None
    with propagation.continue_with(value):
        pay()
    client, server = trace.invocations()
    assert (server.seq, server.parent, server.handoff) == (client.seq, client.iid, "remote")
    token = otel_context.attach(received)
    try:
        assert propagation.from_otel_context() == value  # the current OpenTelemetry context
    finally:
        otel_context.detach(token)
    assert propagation.from_otel_context(otel.extract({"traceparent": "garbage"})) is None


def test_a_pass_through_service_hands_off_from_the_extracted_value(trace: Capture) -> None:
    propagator = InvoseqPropagator()
    outgoing: dict[str, str] = {}
    propagator.inject(outgoing, context=propagator.extract({"traceparent": VALID}))
    sent = parse_traceparent(outgoing["traceparent"])
    assert sent is not None
    assert sent.trace_id.hex() == TRACE_ID  # the sequence goes on, under a new hand-off
    (hop,) = handoffs(trace)
    assert (hop.hid, hop.parent, hop.seq.hex()) == (sent.parent_id, 0, TRACE_ID)


# -- the environment of a child process ------------------------------------------------------------


@tracer.traced
def spawn(env: dict[str, str]) -> bool:
    return propagation.inject_env(env, name="worker.py")


def test_the_environment_carries_the_hand_off_to_a_child(trace: Capture) -> None:
    env = {"PATH": "/usr/bin", "TRACESTATE": "congo=t61rcWkgMzE"}
    assert spawn(env)
    (root,) = trace.invocations()
    (hop,) = handoffs(trace)
    assert (hop.kind, method_names(trace)[hop.method]) == ("process", "worker.py")
    assert env["TRACEPARENT"] == f"00-{root.seq}-{hop.hid:016x}-03"
    assert env["TRACESTATE"] == f"invoseq={ids.identity().puid:x},congo=t61rcWkgMzE"
    assert propagation.extract_env(env) == (bytes.fromhex(root.seq), 0, hop.hid)
    assert propagation.extract_env({"traceparent": VALID}) is None  # variable names are exact


PARENT = """
import os, subprocess, sys
import tracer
from tracer import propagation

@tracer.traced
def build():
    env = dict(os.environ)
    assert propagation.inject_env(env, name="compile.py")
    subprocess.run([sys.executable, {child!r}], env=env, check=True)

build()
"""

CHILD = """
import tracer
from tracer import propagation

@tracer.traced
def compile_module():
    return 1

with propagation.continue_from_env():
    compile_module()
"""


@pytest.mark.system
def test_a_child_process_continues_the_sequence_in_the_repository(tmp_path: Path) -> None:
    child = write_script(tmp_path / "child.py", CHILD)
    parent = write_script(tmp_path / "parent.py", PARENT.format(child=str(child)))
    db = tmp_path / "cmr.sqlite"
    with cmr_server(db) as endpoint:
        run_traced(parent, endpoint)
    (summary,) = cmr_json(db, "ls")
    assert (summary["invocations"], summary["processes"]) == (2, 2)
    root = cmr_json(db, "show", summary["seq"])["root"]
    assert shape(root) == {
        "name": "__main__.build",
        "status": "ok",
        "children": [{"name": "__main__.compile_module", "status": "ok"}],
    }
    (hop,) = root["children"]
    assert hop["handoff"]["kind"] == "process"
    assert hop["process"]["puid"] != root["process"]["puid"]

"""W3C Trace Context Level 2 end to end: what a traced call sends on of the context it continues.

Each row goes through the public API: ``with tracer.continue_from(incoming): send(outgoing)``,
where the traced ``send`` calls ``tracer.inject(outgoing)``. The trace-flags and the other
vendors' tracestate entries come out as they came in (the side table of tracer.propagation),
behind our own entry. Spec references (§) are to https://www.w3.org/TR/trace-context-2/.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from http.client import HTTPMessage
from typing import Any

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

import tracer
from tracer import propagation
from tracer._core import accel, ids
from tracer.propagation import InvoseqPropagator, parse_traceparent
from tracer.testing import Capture, capture

T = "4bf92f3577b34da6a3ce929d0e0e4736"  # the spec's example trace-id (§3.2.3)
P = "00f067aa0ba902b7"
VALID = f"00-{T}-{P}-01"


@pytest.fixture(autouse=True, name="trace")
def _trace() -> Iterator[Capture]:
    propagation._incoming.clear()  # the rows share a trace-id: each starts with none remembered
    with capture() as trace:
        yield trace


def ours() -> str:
    return f"invoseq={ids.identity().puid:x}"


def headers(*fields: tuple[str, str]) -> HTTPMessage:
    """Request headers as a server gets them (``BaseHTTPRequestHandler.headers``): a name may
    repeat, in any case."""
    message = HTTPMessage()
    for name, value in fields:
        message[name] = value  # adds a field, never replaces one
    return message


@tracer.traced
def send(outgoing: dict[str, str]) -> dict[str, str]:
    assert tracer.inject(outgoing, name="POST /downstream")
    return outgoing


def through(incoming: Any, outgoing: dict[str, str] | None = None) -> dict[str, str]:
    with tracer.continue_from(incoming):
        return send({} if outgoing is None else outgoing)


def sent(outgoing: dict[str, str]) -> tuple[str, str, str]:
    """(trace-id, trace-flags, the tracestate after our entry) of what went out."""
    parent = parse_traceparent(outgoing["traceparent"])
    assert parent is not None
    assert outgoing["traceparent"].startswith("00-")  # §3.2.4: the highest version we know
    state = outgoing["tracestate"]
    assert state == ours() or state.startswith(ours() + ",")  # §3.5: ours first
    return parent.trace_id.hex(), f"{parent.flags:02x}", state[len(ours()) + 1 :]


# -- trace-flags (§3.2.2.5) ------------------------------------------------------------------------

FLAGS = [  # (traceparent, flags sent, why)
    (f"00-{T}-{P}-00", "00", "§3.2.2.5.1 not sampled stays not sampled"),
    (f"00-{T}-{P}-01", "01", "§3.2.2.5.1 sampled stays sampled"),
    (f"00-{T}-{P}-02", "02", "§3.2.2.5.2 random, not sampled: kept"),
    (f"00-{T}-{P}-03", "03", "§3.2.2.5.2 random and sampled: kept"),
    (f"00-{T}-{P}-09", "01", "§3.2.2.5.3 unknown bit 0x08 set to zero"),
    (f"00-{T}-{P}-fc", "00", "§3.2.2.5.3 every unknown bit set to zero"),
    (f"00-{T}-{P}-ff", "03", "§3.2.2.5.3 unknown bits dropped, known ones kept"),
    (f"cc-{T}-{P}-02-future", "02", "§3.2.4 a higher version's flags, sent as version 00"),
    (f"cc-{T}-{P}-f1", "01", "§3.2.4 a higher version: unknown bits dropped too"),
]


@pytest.mark.parametrize(("traceparent", "flags"), [pytest.param(*r[:2], id=r[2]) for r in FLAGS])
def test_the_incoming_trace_flags_go_out_with_the_sequence(traceparent: str, flags: str) -> None:
    outgoing = through(headers(("traceparent", traceparent)))
    assert sent(outgoing) == (T, flags, "")
    assert not outgoing["traceparent"].endswith(P)  # §3.4: a new parent-id, the hand-off's


def test_a_sequence_invoseq_started_is_sampled_and_random() -> None:
    """Sampled: invoseq records every call of a traced function. Random (§3.2.2.5.2: the
    right-most 7 bytes uniformly random): the bit that keeps a new sequence id from being all zero
    is the lowest of the 9th byte, left of them; each of their 56 bits varies."""
    trace_id, flags, others = sent(send({}))
    assert (flags, others) == ("03", "")
    assert int(trace_id, 16) & ids.NONZERO_BIT
    draws = [ids.new_seq] + ([accel.speedups.new_seq] if accel.speedups is not None else [])
    for draw in draws:  # the pure Python source and the C accelerator's own
        drawn = [int.from_bytes(draw()[9:], "big") for _ in range(256)]
        assert [bit for bit in range(56) if len({(d >> bit) & 1 for d in drawn}) < 2] == []
        assert all(int.from_bytes(draw(), "big") & ids.NONZERO_BIT for _ in range(64))


# -- tracestate (§3.3, §3.5) -----------------------------------------------------------------------

MEMBERS_32 = ",".join(f"bar{i:02d}={i:02d}" for i in range(1, 33))
SMALL = [f"k{i:02d}=" + "v" * 40 for i in range(12)]  # 44 characters each
BIG = "big=" + "x" * 200  # over 128 characters

TRACESTATES = [  # (extra incoming fields, tracestate sent after ours, why)
    ([("tracestate", "foo=1,bar=2")], "foo=1,bar=2", "§3.5 other vendors' entries kept in order"),
    (
        [("tracestate", "foo=1,invoseq=old,bar=2")],
        "foo=1,bar=2",
        "§3.5 our old entry in the middle: updated and moved to the left",
    ),
    ([("tracestate", "foo=1,foo=2,bar=3")], "foo=1,bar=3", "§3.3.3 a duplicate key: first kept"),
    ([("tracestate", "foo=1"), ("tracestate", "foo=1")], "foo=1", "§3.3.3 duplicate across fields"),
    ([("tracestate", "foo=1,BAR=2")], "", "§3.3.2.2.1 an invalid key: the whole tracestate goes"),
    ([("tracestate", "foo=1,bar=")], "", "§3.3.2.2.2 an empty value: the whole tracestate goes"),
    ([("tracestate", "foo=1,bar")], "", "§3.3.2.1 a member without '=': the whole goes"),
    ([("tracestate", MEMBERS_32)], MEMBERS_32.rsplit(",", 1)[0], "§3.3.2 32 members: ours + 31"),
    ([("tracestate", MEMBERS_32 + ",bar33=33")], "", "§3.3.2 33 members: invalid, discarded"),
    (
        [("tracestate", ",".join([*SMALL[:3], BIG, *SMALL[3:8]]))],
        ",".join(SMALL[:8]),
        "§3.3.3.1 past 512 characters an entry over 128 characters goes first",
    ),
    (
        [("tracestate", ",".join([BIG, *SMALL]))],
        ",".join(SMALL[:10]),
        "§3.3.3.1 past 512 characters the large entry, then entries from the right",
    ),
    (
        [("tracestate", "foo=1,bar=2"), ("tracestate", "rojo=1,congo=2"), ("tracestate", "baz=3")],
        "foo=1,bar=2,rojo=1,congo=2,baz=3",
        "§3.3.2 several tracestate fields combine with ',' in order (RFC 9110 §5.3)",
    ),
    ([("tracestate", ""), ("tracestate", "foo=1")], "foo=1", "§3.3.2 an empty field"),
    (
        [("tracestate", " , foo=1 \t,\t ,bar=2 ,,")],
        "foo=1,bar=2",
        "§3.3.2 empty members and OWS around members",
    ),
    ([("tracestate", "foo= 1")], "foo= 1", "§3.3.2.2.2 a value's leading spaces are its own"),
    ([("TraceState", "foo=1")], "foo=1", "§3.3.1 the name in any case"),
    ([("trace-state", "foo=1")], "", "§3.3.1 another name is no tracestate"),
]


@pytest.mark.parametrize(
    ("fields", "others"), [pytest.param(*row[:2], id=row[2]) for row in TRACESTATES]
)
def test_the_incoming_tracestate_goes_out_behind_our_entry(
    fields: list[tuple[str, str]], others: str
) -> None:
    outgoing = through(headers(("traceparent", f"00-{T}-{P}-00"), *fields))
    assert sent(outgoing) == (T, "00", others)
    assert len(outgoing["tracestate"]) <= propagation.MAX_TRACESTATE_CHARS


IGNORED = [  # incoming fields whose traceparent is invalid or missing: a new sequence, no state
    ([("traceparent", f"00-{T}-{'0' * 16}-00")], "§3.3 an invalid traceparent: tracestate too"),
    ([("traceparent", f"00-{T}-{P}-0g")], "§3.2.2.5 invalid flags: tracestate ignored too"),
    ([("traceparent", f"ff-{T}-{P}-00")], "§3.2.2.1 version ff: tracestate ignored too"),
    ([("traceparent", VALID), ("traceparent", VALID)], "§3.2 a traceparent sent twice"),
    ([], "§3.3 a tracestate without traceparent is ignored"),
]


@pytest.mark.parametrize("fields", [pytest.param(row[0], id=row[1]) for row in IGNORED])
def test_without_a_valid_traceparent_the_tracestate_is_ignored(
    fields: list[tuple[str, str]],
) -> None:
    trace_id, flags, others = sent(through(headers(*fields, ("tracestate", "foo=1,bar=2"))))
    assert (flags, others) == ("03", "")  # a sequence of our own
    assert trace_id != T


def test_a_higher_version_s_tracestate_is_kept() -> None:  # §3.3.5
    outgoing = through(headers(("traceparent", f"cc-{T}-{P}-01-x"), ("tracestate", "foo=1")))
    assert sent(outgoing) == (T, "01", "foo=1")


@tracer.traced
def fan_out(count: int) -> list[dict[str, str]]:
    return [send({}) for _ in range(count)] + [nested()]


@tracer.traced
def nested() -> dict[str, str]:
    return send({})


def test_every_outgoing_request_of_the_sequence_carries_the_context() -> None:
    with tracer.continue_from(headers(("traceparent", f"00-{T}-{P}-02"), ("tracestate", "a=1"))):
        carriers = fan_out(3)
    assert {sent(c) for c in carriers} == {(T, "02", "a=1")}
    assert len({c["traceparent"] for c in carriers}) == 4  # §3.4: a parent-id each


def test_a_tracestate_already_in_the_outgoing_carrier_comes_before_the_incoming_one() -> None:
    """Another vendor in this process wrote it after the request came in: §3.5, newer entries
    go left; a key it has wins over the incoming one; of a key it repeats, its first member is
    kept; an invalid one is discarded."""
    incoming = headers(("traceparent", f"00-{T}-{P}-01"), ("tracestate", "foo=1,bar=2"))
    outgoing = through(incoming, {"TraceState": "congo=9,foo=3"})
    assert sent(outgoing) == (T, "01", "congo=9,foo=3,bar=2")
    assert "TraceState" not in outgoing  # one field per name
    dup = sent(through(incoming, {"tracestate": "congo=9,congo=3"}))  # its first congo kept
    assert dup == (T, "01", "congo=9,foo=1,bar=2")
    assert sent(through(incoming, {"tracestate": "congo=9,CONGO=3"})) == (T, "01", "foo=1,bar=2")


# -- the other carriers ----------------------------------------------------------------------------


@tracer.traced
def spawn(env: dict[str, str]) -> dict[str, str]:
    assert propagation.inject_env(env, name="worker.py")
    return env


def test_the_environment_carries_flags_and_tracestate_to_a_child() -> None:
    parent_env = {"TRACEPARENT": f"00-{T}-{P}-02", "TRACESTATE": "foo=1,bar=2"}
    with propagation.continue_from_env(parent_env):
        child_env = spawn({"PATH": "/usr/bin"})
    assert child_env["TRACEPARENT"].endswith("-02")
    assert child_env["TRACESTATE"] == f"{ours()},foo=1,bar=2"
    with propagation.continue_from_env(child_env):  # and the child's own children
        grandchild = spawn({})
    assert sent({k.lower(): v for k, v in grandchild.items()}) == (T, "02", "foo=1,bar=2")


@tracer.traced
def call_through(otel: InvoseqPropagator) -> dict[str, str]:
    carrier: dict[str, str] = {}
    otel.inject(carrier)
    return carrier


def test_the_opentelemetry_propagator_carries_flags_and_tracestate() -> None:
    otel = InvoseqPropagator()
    received = otel.extract({"TraceParent": f"00-{T}-{P}-00", "tracestate": "foo=1,bar=2"})
    with propagation.continue_with(propagation.from_otel_context(received)):
        assert sent(call_through(otel)) == (T, "00", "foo=1,bar=2")
    passed_on: dict[str, str] = {}  # a service that only passes requests on
    otel.inject(passed_on, context=received)
    assert sent(passed_on) == (T, "00", "foo=1,bar=2")


class PairsGetter(Getter[list[tuple[str, str]]]):
    """A server integration's own getter (``propagation.extract(carrier, getter=...)``)."""

    def get(self, carrier: list[tuple[str, str]], key: str) -> list[str] | None:
        return [v for k, v in carrier if k == key] or None

    def keys(self, carrier: list[tuple[str, str]]) -> list[str]:
        return [k for k, _ in carrier]


def test_extract_with_a_getter_keeps_the_context_too() -> None:
    pairs = [("traceparent", f"00-{T}-{P}-03"), ("tracestate", "foo=1")]
    with propagation.continue_with(propagation.extract(pairs, getter=PairsGetter())):
        assert sent(send({})) == (T, "03", "foo=1")


def test_a_sequence_adopted_from_an_opentelemetry_span_carries_the_span_s_context() -> None:
    context = SpanContext(
        int(T, 16), int(P, 16), True, TraceFlags(0x02), TraceState([("foo", "1")])
    )
    with otel_trace.use_span(NonRecordingSpan(context), end_on_exit=False):
        assert sent(send({})) == (T, "02", "foo=1")


# -- the side table --------------------------------------------------------------------------------


def incoming_of(n: int) -> HTTPMessage:
    return headers(("traceparent", f"00-{n + 1:032x}-{P}-00"), ("tracestate", f"n={n}"))


def test_the_side_table_is_bounded_and_forgets_the_least_recently_used_sequence() -> None:
    bound = propagation.MAX_SEQUENCES
    first, second = tracer.extract(incoming_of(0)), tracer.extract(incoming_of(1))
    for n in range(2, bound):
        tracer.extract(incoming_of(n))
    with propagation.continue_with(first):  # an inject uses the first: now the most recent
        assert sent(send({}))[1:] == ("00", "n=0")
    for n in range(bound, bound + 2):
        tracer.extract(incoming_of(n))
    assert len(propagation._incoming) == bound  # the tracer does not grow
    with propagation.continue_with(second):  # forgotten: sent like a sequence of our own
        assert sent(send({}))[1:] == ("03", "")
    with propagation.continue_with(first):
        assert sent(send({}))[1:] == ("00", "n=0")
    assert len(propagation._incoming) == bound


FORK = f"""
import os
import tracer
from tracer import propagation
from tracer.testing import capture

@tracer.traced
def send():
    outgoing = {{}}
    tracer.inject(outgoing)
    return outgoing

with capture():
    value = tracer.extract({{"traceparent": "00-{T}-{P}-02", "tracestate": "foo=1"}})
    pid = os.fork()
    if pid == 0:
        try:
            with propagation.continue_with(value):
                outgoing = send()
            print(outgoing["traceparent"][-2:], outgoing["tracestate"].split(",", 1)[1], flush=True)
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
"""


@pytest.mark.system
def test_a_forked_child_keeps_the_side_table() -> None:
    command = [sys.executable, "-c", FORK]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "02 foo=1\n"), done.stderr

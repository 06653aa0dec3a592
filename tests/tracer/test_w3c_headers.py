"""The W3C Trace Context headers as this tracer reads and writes them: which traceparent and
tracestate values are valid, and how our tracestate entry joins the others.

Spec references (§) are to W3C Trace Context Level 2, https://www.w3.org/TR/trace-context-2/.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import tracer
from tests.tracer.w3c_service import W3CServiceHandler
from tracer import propagation
from tracer._core import ids
from tracer.propagation import parse_traceparent, parse_tracestate
from tracer.testing import Capture, capture

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"  # the spec's own example (§3.2.3)
PARENT_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with capture() as trace:
        yield trace


# -- the traceparent (§3.2) ------------------------------------------------------------------------

T, P = TRACE_ID, PARENT_ID


VALID_TRACEPARENTS = [  # (value, version, flags, why)
    (VALID, 0, 1, "§3.2.3 sampled"),
    (f"00-{T}-{P}-00", 0, 0, "§3.2.3 not sampled"),
    (f"00-{T}-{P}-ff", 0, 255, "§3.2.2.5 flags: any 2 hex digits"),
    (f" \t{VALID}", 0, 1, "RFC 9110 §5.5 leading OWS is not part of the value"),
    (f"{VALID} \t", 0, 1, "RFC 9110 §5.5 trailing OWS is not part of the value"),
    (f"cc-{T}-{P}-01", 0xCC, 1, "§3.2.4 a future version"),
    (f"cc-{T}-{P}-01-what-the-future-is", 0xCC, 1, "§3.2.4 future: extra fields ignored"),
    (f"01-{T}-{P}-09-", 1, 9, "§3.2.4 future: flags followed by a dash"),
]


@pytest.mark.parametrize(
    ("value", "version", "flags"), [pytest.param(*row[:3], id=row[3]) for row in VALID_TRACEPARENTS]
)
def test_valid_traceparents(value: str, version: int, flags: int) -> None:
    assert parse_traceparent(value) == (version, bytes.fromhex(T), int(P, 16), flags)
    assert propagation.extract({"traceparent": value}) == (bytes.fromhex(T), 0, int(P, 16))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(f"ff-{T}-{P}-01", id="§3.2.2.1 version ff is invalid"),
        pytest.param(f"0-{T}-{P}-01", id="§3.2.2.1 version: 1 digit"),
        pytest.param(f"000-{T}-{P}-01", id="§3.2.4 version: not 2 hex then a dash"),
        pytest.param(f".0-{T}-{P}-01", id="§3.2.2.1 version: not hex"),
        pytest.param(f"0g-{T}-{P}-01", id="§3.2.2.1 version: g is not hex"),
        pytest.param(f"CC-{T}-{P}-01", id="§3.2.2 HEXDIGLC: uppercase version"),
        pytest.param(f"00-{T}-{P}-01-extra", id="§3.2.2.2 version 00: no extra field"),
        pytest.param(f"00-{T}-{P}-01.", id="§3.2.2.2 version 00: exactly 55 characters"),
        pytest.param(f"cc-{T}-{P}-01.future", id="§3.2.4 future: flags not followed by a dash"),
        pytest.param(f"cc-{T}-{P}-1", id="§3.2.4 future: shorter than 55 characters"),
        pytest.param(f"00-{T.upper()}-{P}-01", id="§3.2.2.3 uppercase trace-id"),
        pytest.param(f"00-{'0' * 32}-{P}-01", id="§3.2.2.3 all-zero trace-id"),
        pytest.param(f"00-{T[:-1]}-{P}-01", id="§3.2.2.3 trace-id: 31 hex"),
        pytest.param(f"00-{T}0-{P}-01", id="§3.2.2.3 trace-id: 33 hex"),
        pytest.param(f"00-.{T[1:]}-{P}-01", id="§3.2.2.3 trace-id: not hex"),
        pytest.param(f"00-{T}-{P.upper()}-01", id="§3.2.2.4 uppercase parent-id"),
        pytest.param(f"00-{T}-{'0' * 16}-01", id="§3.2.2.4 all-zero parent-id"),
        pytest.param(f"00-{T}-{P[:-1]}-01", id="§3.2.2.4 parent-id: 15 hex"),
        pytest.param(f"00-{T}-{P}0-01", id="§3.2.2.4 parent-id: 17 hex"),
        pytest.param(f"00-{T}-{P}-0A", id="§3.2.2.5 uppercase flags"),
        pytest.param(f"00-{T}-{P}-1", id="§3.2.2.5 flags: 1 hex"),
        pytest.param(f"00-{T}-{P}-001", id="§3.2.2.5 flags: 3 hex"),
        pytest.param(f"00-{T}-{P}-.0", id="§3.2.2.5 flags: not hex"),
        pytest.param(f"00 -{T}-{P}-01", id="§3.2.2 no whitespace inside"),
        pytest.param(f"{VALID}\n", id="RFC 9110 §5.6.3 a newline is not OWS"),
        pytest.param("", id="empty"),
        pytest.param("garbage", id="garbage"),
    ],
)
def test_invalid_traceparents_are_ignored(value: str) -> None:
    assert parse_traceparent(value) is None
    assert propagation.extract({"traceparent": value, "tracestate": "congo=1"}) is None


def test_header_names_match_in_any_case_and_one_traceparent_only() -> None:
    value = (bytes.fromhex(T), 0, int(P, 16))
    for name in ("traceparent", "TraceParent", "TRACEPARENT"):  # §3.2.1
        assert propagation.extract({name: VALID}) == value
    assert propagation.extract({"traceparent": [VALID]}) == value
    assert propagation.extract({}) is None
    assert propagation.extract({"trace-parent": VALID}) is None
    twice = {"traceparent": VALID, "Traceparent": f"00-{T}-{'1' * 16}-01"}
    assert propagation.extract(twice) is None  # RFC 9110 §5.3: not a list field


@pytest.mark.parametrize(
    ("parent_id", "hid"),
    [
        (PARENT_ID, int(PARENT_ID, 16)),
        ("7fffffffffffffff", 2**63 - 1),  # every id invoseq writes fits 63 bits
        ("ffffffffffffffff", 2**63 - 1),  # a foreign one is masked to 63 bits ...
        ("8000000000000001", 1),
        ("8000000000000000", 2**63 - 1),  # ... and never becomes 0 ("no hand-off")
    ],
)
def test_a_foreign_parent_id_becomes_a_63_bit_hand_off_id(parent_id: str, hid: int) -> None:
    assert propagation.extract({"traceparent": f"00-{T}-{parent_id}-01"}) == (
        bytes.fromhex(T),
        0,
        hid,
    )


# -- the tracestate (§3.3) -------------------------------------------------------------------------

KEY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-*/@"
VALUE_CHARS = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in ",=")
MEMBERS_32 = ",".join(f"bar{i:02d}={i:02d}" for i in range(1, 33))


SPEC_EXAMPLE = [("rojo", "00f067aa0ba902b7"), ("congo", "t61rcWkgMzE")]
VALID_TRACESTATES = [
    ("", [], "§3.3.2 empty header"),
    ("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", SPEC_EXAMPLE, "§3.3.4 example"),
    ("foo=1 \t , \t bar=2", [("foo", "1"), ("bar", "2")], "§3.3.2 OWS around members"),
    ("\t foo=1 \t", [("foo", "1")], "§3.3.2 OWS at both ends"),
    (",foo=1,, ,bar=2,", [("foo", "1"), ("bar", "2")], "§3.3.2 empty members"),
    ("foo= 1", [("foo", " 1")], "§3.3.2.2.2 leading spaces are the value's"),
    ("tenant@vendor=1", [("tenant@vendor", "1")], "§3.3.2.2.1 multi-tenant key"),
    ("0tenant@v=1", [("0tenant@v", "1")], "§3.3.2.2.1 a key may start with a digit"),
    (
        "foo@=1,foo@bar@baz=2",
        [("foo@", "1"), ("foo@bar@baz", "2")],
        "§3.3.2.2.1 Level 2: @ is a keychar (the Level 1 REC split tenant@system)",
    ),
    (f"a{KEY_CHARS}=1", [(f"a{KEY_CHARS}", "1")], "§3.3.2.2.1 every keychar"),
    ("k" * 256 + "=1", [("k" * 256, "1")], "§3.3.2.2.1 key: 256 characters"),
    (f"foo={VALUE_CHARS}", [("foo", VALUE_CHARS)], "§3.3.2.2.2 every value character"),
    ("foo=" + "v" * 256, [("foo", "v" * 256)], "§3.3.2.2.2 value: 256 characters"),
    (MEMBERS_32, [(f"bar{i:02d}", f"{i:02d}") for i in range(1, 33)], "§3.3.2 32 members"),
    ("foo=1,foo=1", [("foo", "1")], "§3.3.3 duplicate key: the first member kept"),
    ("foo=1,bar=2,foo=3", [("foo", "1"), ("bar", "2")], "§3.3.3 duplicate key, other value"),
    (
        MEMBERS_32 + ",bar01=99",
        [(f"bar{i:02d}", f"{i:02d}") for i in range(1, 33)],
        "§3.3.3 a duplicate is no 33rd member",
    ),
]


@pytest.mark.parametrize(
    ("value", "expected"), [pytest.param(v, e, id=why) for v, e, why in VALID_TRACESTATES]
)
def test_valid_tracestates(value: str, expected: list[tuple[str, str]]) -> None:
    assert parse_tracestate(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(MEMBERS_32 + ",bar33=33", id="§3.3.2 33 members"),
        pytest.param("FOO=1", id="§3.3.2.2.1 uppercase key"),
        pytest.param("foo =1", id="§3.3.2.2.1 space in key"),
        pytest.param("foo.bar=1", id="§3.3.2.2.1 dot in key"),
        pytest.param("@foo=1", id="§3.3.2.2.1 key starts with @"),
        pytest.param("_foo=1", id="§3.3.2.2.1 key starts with _"),
        pytest.param("k" * 257 + "=1", id="§3.3.2.2.1 key: 257 characters"),
        pytest.param("=1", id="§3.3.2.2.1 empty key"),
        pytest.param("foo", id="§3.3.2.1 no ="),
        pytest.param("foo=", id="§3.3.2.2.2 empty value"),
        pytest.param("foo=bar=baz", id="§3.3.2.2.2 = in value"),
        pytest.param("foo=a\tb", id="§3.3.2.2.2 tab in value"),
        pytest.param("foo=caf\u00e9", id="§3.3.2.2.2 non-ASCII value"),
        pytest.param("foo=" + "v" * 257, id="§3.3.2.2.2 value: 257 characters"),
        pytest.param("foo=1,bar", id="§3.3.2 one bad member invalidates the header"),
    ],
)
def test_invalid_tracestates_are_discarded_whole(value: str) -> None:
    assert parse_tracestate(value) is None
    # §3.3: a failure to parse tracestate never affects the traceparent.
    assert propagation.extract({"traceparent": VALID, "tracestate": value}) is not None


@tracer.traced
def call_with(carrier: dict[str, str]) -> dict[str, str]:
    tracer.inject(carrier)
    return carrier


def members(carrier: dict[str, str]) -> list[str]:
    return [key for key, _ in parse_tracestate(carrier["tracestate"]) or ()]


def test_our_entry_goes_first_and_other_vendors_entries_follow(trace: Capture) -> None:
    ours = f"invoseq={ids.identity().puid:x}"
    sent = call_with({"TraceState": "rojo=00f067aa0ba902b7,invoseq=old, congo=t61rcWkgMzE"})
    assert sent == {  # one field per name (§3.5), our entry replaced and moved left (§3.5)
        "traceparent": sent["traceparent"],
        "tracestate": f"{ours},rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    }
    assert call_with({"tracestate": "foo=1,foo=2"})["tracestate"] == f"{ours},foo=1"  # one foo
    assert call_with({"tracestate": "foo=1,BAR=2"})["tracestate"] == ours  # invalid: discarded
    full = members(call_with({"tracestate": MEMBERS_32}))
    assert full == ["invoseq"] + [f"bar{i:02d}" for i in range(1, 32)]  # 32 at most: bar32 dropped
    # Past 512 characters whole entries go: those over 128 characters first, then from the right.
    small = [f"k{i:02d}=" + "v" * 40 for i in range(12)]
    long_state = ",".join(["big=" + "x" * 200, *small])
    kept = call_with({"tracestate": long_state})["tracestate"]
    assert len(kept) <= 512
    assert members({"tracestate": kept}) == ["invoseq"] + [f"k{i:02d}" for i in range(10)]


# -- over HTTP: the scenarios of the official test suite, through tests/tracer/w3c_service.py ------
# The suite (w3c/trace-context, test/) is not part of this repository; docs/protocol.md says how
# to run it. Here our own harness asks the same service for callbacks and reads their headers.

Fields = list[tuple[str, str]]


class CallbackHandler(BaseHTTPRequestHandler):
    """The harness's side: keeps the header fields of each callback, by path."""

    server: CallbackServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.received[self.path] = list(self.headers.items())
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class CallbackServer(ThreadingHTTPServer):
    received: dict[str, Fields]


@dataclass
class Harness:
    service: tuple[str, int]
    callbacks: CallbackServer

    def request(self, fields: Fields, count: int = 1) -> list[Fields]:
        """POST to the service with these header fields (a name may repeat) and ask it for
        ``count`` callbacks; the header fields of each callback."""
        base = f"http://127.0.0.1:{self.callbacks.server_address[1]}"
        paths = [f"/callback/{id(fields)}.{i}" for i in range(count)]
        body = json.dumps([{"url": base + path, "arguments": []} for path in paths]).encode()
        connection = http.client.HTTPConnection(*self.service, timeout=30)
        try:
            connection.putrequest("POST", "/test")
            for name, value in fields:
                connection.putheader(name, value)
            connection.putheader("Content-Type", "application/json")
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, json.dumps([200] * count).encode())
        finally:
            connection.close()
        return [self.callbacks.received.pop(path) for path in paths]


def serving(server: ThreadingHTTPServer) -> threading.Thread:
    serve = server.serve_forever
    thread = threading.Thread(target=serve, args=(0.01,), name="w3c-test-server", daemon=True)
    thread.start()
    return thread


@pytest.fixture(name="harness")
def _harness(trace: Capture) -> Iterator[Harness]:
    service = ThreadingHTTPServer(("127.0.0.1", 0), W3CServiceHandler)
    callbacks = CallbackServer(("127.0.0.1", 0), CallbackHandler)
    callbacks.received = {}
    threads = [serving(service), serving(callbacks)]
    try:
        yield Harness(("127.0.0.1", service.server_address[1]), callbacks)
    finally:
        for server in (service, callbacks):
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join(30)


def context_of(fields: Fields) -> tuple[str, str, str, str]:
    """(trace-id, parent-id, trace-flags, tracestate after our entry) of a callback: exactly one
    traceparent, in version 00, and our entry first."""
    (value,) = [v for k, v in fields if k.lower() == "traceparent"]
    version, trace_id, parent_id, flags = value.split("-")
    state = ",".join(v for k, v in fields if k.lower() == "tracestate")
    assert version == "00"
    assert state == f"invoseq={ids.identity().puid:x}" or state.startswith("invoseq=")
    return trace_id, parent_id, flags, state.partition(",")[2]


T33 = ",".join(f"bar{i:02d}={i:02d}" for i in range(1, 34))
SCENARIOS = [  # (incoming header fields, continued: (flags, tracestate after ours) | None, why)
    ([], None, "no traceparent: a new trace"),
    ([("traceparent", f"00-{T}-{P}-00")], ("00", ""), "§3.2 continued: flags kept"),
    ([("TrAcEpArEnT", f"00-{T}-{P}-03")], ("03", ""), "§3.2.1 the name in any case"),
    ([("trace-parent", VALID)], None, "§3.2.1 another name"),
    ([("traceparent", VALID), ("traceparent", f"00-{T}-{'1' * 16}-01")], None, "§3.2 twice"),
    ([("traceparent", f"ff-{T}-{P}-01")], None, "§3.2.2.1 version ff"),
    ([("traceparent", f"00-{T}-{P}-01.")], None, "§3.2.2.2 version 00: 55 characters"),
    ([("traceparent", f"00-{'0' * 32}-{P}-01")], None, "§3.2.2.3 all-zero trace-id"),
    ([("traceparent", f"00-{T}-{P.upper()}-01")], None, "§3.2.2.4 uppercase parent-id"),
    ([("traceparent", f"00-{T}-{P}-0.")], None, "§3.2.2.5 flags not hex"),
    ([("traceparent", f"cc-{T}-{P}-01-what-the-future")], ("01", ""), "§3.2.4 higher version"),
    ([("traceparent", f"cc-{T}-{P}-01.what")], None, "§3.2.4 higher version: no dash"),
    ([("traceparent", f"\t {VALID} ")], ("01", ""), "RFC 9110 §5.5 OWS around traceparent"),
    ([("tracestate", "foo=1")], None, "§3.3 tracestate without traceparent: ignored"),
    (
        [("traceparent", f"00-{T}-{P}-00"), ("TraceState", "foo=1,bar=2")],
        ("00", "foo=1,bar=2"),
        "§3.5 tracestate kept behind ours",
    ),
    (
        [
            ("traceparent", VALID),
            ("tracestate", "foo=1,bar=2"),
            ("tracestate", ""),
            ("tracestate", "rojo=1 \t, congo=2"),
        ],
        ("01", "foo=1,bar=2,rojo=1,congo=2"),
        "§3.3.2 fields combined, empty and OWS skipped",
    ),
    ([("traceparent", VALID), ("trace-state", "foo=1")], ("01", ""), "§3.3.1 another name"),
    (
        [("traceparent", f"00-{T}-{P}-00"), ("tracestate", "foo=1,foo=1")],
        ("00", "foo=1"),
        "§3.3.3 a duplicate key: the tracestate inherited",
    ),
    (
        [("traceparent", f"00-{T}-{P}-00"), ("tracestate", "foo=1,foo=2")],
        ("00", "foo=1"),
        "§3.3.3 a duplicate key, other value: the first kept",
    ),
    (
        [("traceparent", VALID), ("tracestate", "foo=1"), ("tracestate", "foo=1")],
        ("01", "foo=1"),
        "§3.3.3 the same member in two fields: kept once",
    ),
    (
        [("traceparent", VALID), ("tracestate", "foo=1"), ("tracestate", "foo=2")],
        ("01", "foo=1"),
        "§3.3.3 a duplicate key across fields: the first kept",
    ),
    ([("traceparent", VALID), ("tracestate", T33)], ("01", ""), "§3.3.2 33 members"),
    ([("traceparent", VALID), ("tracestate", "foo=,bar=3")], ("01", ""), "§3.3.2.2.2 empty"),
    (
        [("traceparent", VALID), ("tracestate", "foo@=1,bar=2")],
        ("01", "foo@=1,bar=2"),
        "§3.3.2.2.1 Level 2: a key may end in @",
    ),
    ([("traceparent", VALID), ("tracestate", "@foo=1,bar=2")], ("01", ""), "§3.3.2.2.1 @ first"),
]


@pytest.mark.system
@pytest.mark.parametrize(
    ("fields", "continued"), [pytest.param(*row[:2], id=row[2]) for row in SCENARIOS]
)
def test_the_w3c_test_service_continues_valid_contexts_only(
    harness: Harness, fields: Fields, continued: tuple[str, str] | None
) -> None:
    (callback,) = harness.request(fields)
    trace_id, parent_id, flags, others = context_of(callback)
    if continued is None:
        assert (trace_id != T, flags, others) == (True, "03", "")  # ours: sampled, random
    else:
        assert (trace_id, flags, others) == (T, *continued)
        assert parent_id != P


@pytest.mark.system
@pytest.mark.parametrize("fields", [[("traceparent", f"00-{T}-{P}-02")], []], ids=["valid", "none"])
def test_every_callback_of_a_request_is_a_hand_off_of_its_own(
    harness: Harness, fields: Fields
) -> None:
    contexts = [context_of(callback) for callback in harness.request(fields, count=3)]
    assert len({trace_id for trace_id, *_ in contexts}) == 1
    assert len({parent_id for _, parent_id, *_ in contexts}) == 3
    if fields:
        assert {(trace_id, flags) for trace_id, _, flags, _ in contexts} == {(T, "02")}

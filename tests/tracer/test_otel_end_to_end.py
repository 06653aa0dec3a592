"""The evidence: an OpenTelemetry urllib span and a @traced function in ONE tree, through a real
repository (``cmr serve`` → SQLite → ``cmr show``), all real processes and sockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cmr.views.render.text import format_attributes
from tests.support import cmr, cmr_json, cmr_server, run_traced, write_script

PROGRAM = """
import http.server, threading, urllib.error, urllib.request
from opentelemetry.instrumentation.urllib import URLLibInstrumentor
from opentelemetry.sdk.trace import TracerProvider
import tracer
from tracer.otel import InvocationSpanProcessor

provider = TracerProvider()
provider.add_span_processor(InvocationSpanProcessor())
URLLibInstrumentor().instrument(tracer_provider=provider)

class Orders(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/orders":
            self.send_error(404)
            return
        body = b'["apple", "pear"]'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Orders)
serving = threading.Thread(target=server.serve_forever)
serving.start()
base = f"http://127.0.0.1:{server.server_address[1]}"

@tracer.traced
def load_orders():
    with urllib.request.urlopen(base + "/orders", timeout=30) as response:
        orders = response.read()
    try:
        urllib.request.urlopen(base + "/missing", timeout=30)
    except urllib.error.HTTPError:
        pass
    return orders

@tracer.traced
def remember():
    load_orders()
    return tracer.current_sequence()

try:
    print(remember())
finally:
    server.shutdown()
    serving.join()
    server.server_close()
    URLLibInstrumentor().uninstrument()
    tracer.shutdown(30)
"""


def find(node: dict[str, Any], suffix: str) -> list[dict[str, Any]]:
    found = [node] if node["name"].endswith(suffix) else []
    for child in node["children"]:
        found += find(child, suffix)
    return found


@pytest.mark.system
def test_a_urllib_span_and_a_traced_function_appear_in_one_tree(tmp_path: Path) -> None:
    pytest.importorskip(
        "opentelemetry.instrumentation.urllib",
        reason="opentelemetry-instrumentation-urllib is a test dependency: pip install -e .[test]",
    )
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "orders.py", PROGRAM)
    with cmr_server(db) as endpoint:
        seq = run_traced(script, endpoint).stdout.strip()
    assert len(seq) == 32

    tree = cmr_json(db, "show", seq)
    root = tree["root"]
    assert root["name"] == "__main__.remember"
    (caller,) = root["children"]
    assert caller["name"] == "__main__.load_orders"
    ok, missing = caller["children"]
    for span in (ok, missing):
        assert span["name"] == "opentelemetry.instrumentation.urllib.GET"
        assert span["kind"] == "measured"
        assert span["children"] == []
        assert caller["start_ns"] <= span["start_ns"] <= span["end_ns"] <= caller["end_ns"]
    assert ok["status"] == "ok"
    assert ok["attributes"]["http.method"] == "GET"
    assert ok["attributes"]["http.status_code"] == 200
    assert ok["attributes"]["http.url"].endswith("/orders")
    assert ok["attributes"]["otel.kind"] == "CLIENT"
    assert (missing["status"], missing["error"]) == ("error", "HTTPError")
    assert missing["attributes"]["http.status_code"] == 404
    assert root["attributes"] is None  # a traced function records none

    text = cmr(db, "show", seq).stdout
    span_lines = [line for line in text.splitlines() if "urllib.GET" in line]
    assert len(span_lines) == 2
    assert "{http.method=GET, http.url=http://127.0.0.1:" in span_lines[0]
    assert "http.status_code=200" in span_lines[0]
    assert "✗ HTTPError" in span_lines[1]


def test_the_text_shows_the_first_attributes_compactly_and_leaves_otel_ones_to_json() -> None:
    assert format_attributes({"otel.span_id": "00f067aa0ba902b7", "otel.kind": "CLIENT"}) == ""
    attributes: dict[str, str | int | float | bool] = {
        "otel.kind": "CLIENT",
        "http.method": "GET",
        "http.url": "http://example.com/" + "x" * 100,
        "http.status_code": 200,
        "retry": False,
        "ratio": 0.5,
    }
    assert format_attributes(attributes) == (
        "{http.method=GET, http.url=http://example.com/xxxxxxxxxxxxxxxxxxxx…, "
        "http.status_code=200, retry=False, … 1 more}"
    )

"""For the OTLP tests: a real OTLP/HTTP receiver, OTLP/JSON read with the opentelemetry-proto
message definitions, and a real traced program whose sequence crosses threads and a process."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support import cmr_json, cmr_server, run_traced, write_script

#: A shop: checkout prices three items on a pool of two threads, an audit raises (and is
#: caught), and a forked process reserves the stock. The sampler runs, so busy untraced code
#: shows up as estimated calls.
SHOP = """
import multiprocessing as mp
import time
from concurrent.futures import ThreadPoolExecutor
from tracer import traced

def spin(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass

@traced
def price(n):
    spin(40)
    return n * 2

@traced
def audit(total):
    raise ValueError(f"bad total {total}")

@traced
def reserve(n):
    price(n)

@traced
def checkout():
    with ThreadPoolExecutor(2) as pool:
        total = sum(pool.map(price, [1, 2, 3]))
    try:
        audit(total)
    except ValueError:
        pass
    process = mp.get_context("fork").Process(target=reserve, args=(1,))
    process.start()
    process.join(60)
    assert process.exitcode == 0, process.exitcode

if __name__ == "__main__":
    checkout()
"""


def record_shop(tmp: Path) -> tuple[Path, str]:
    """Run the shop traced through a real ``cmr serve``; the repository and the sequence id."""
    db = tmp / "cmr.sqlite"
    script = write_script(tmp / "shop.py", SHOP)
    with cmr_server(db) as endpoint:
        run_traced(
            script,
            endpoint,
            INVOSEQ_INSTRUMENT="1",
            INVOSEQ_SAMPLE_INTERVAL_MS="5",
            INVOSEQ_SPOOL_DIR=str(tmp / "spool"),
        )
    [summary] = cmr_json(db, "ls")
    assert summary["status"] == "complete", summary
    return db, summary["seq"]


def otlp_json_to_request(text: str) -> ExportTraceServiceRequest:
    """OTLP/JSON read the way OTLP receivers read it: ids are hex there, where protobuf's own
    JSON mapping wants base64, so they are converted before ``json_format.Parse`` (which rejects
    any field or value the message definitions do not have)."""
    document = json.loads(text)
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.Parse(json.dumps(document), ExportTraceServiceRequest())


def profiles_json_to_request(text: str | bytes) -> ExportProfilesServiceRequest:
    """OTLP/JSON profiles read as a receiver reads them: the hex ids (links' trace and span ids,
    profile ids) turned into protobuf's base64 first."""
    document = json.loads(text)
    for link in document["dictionary"].get("linkTable", []):
        for key in ("traceId", "spanId"):
            if key in link:
                link[key] = base64.b64encode(bytes.fromhex(link[key])).decode()
    for resource in document["resourceProfiles"]:
        for scope in resource["scopeProfiles"]:
            for profile in scope["profiles"]:
                profile["profileId"] = base64.b64encode(
                    bytes.fromhex(profile["profileId"])
                ).decode()
    return json_format.Parse(json.dumps(document), ExportProfilesServiceRequest())


def attributes(key_values: Any) -> dict[str, Any]:
    """Protobuf ``KeyValue``s as a dict of plain values (arrays as tuples)."""
    return {kv.key: any_value(kv.value) for kv in key_values}


def any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(any_value(item) for item in value.array_value.values)
    return getattr(value, kind)


@dataclass
class Receiver:
    """What an OTLP/HTTP receiver got: decoded requests, and the status it answers with."""

    url: str
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    profiles: list[ExportProfilesServiceRequest] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    status: int = 200
    profiles_status: int = 200  # what it answers on the profiles path
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spans(self) -> list[tuple[Any, Any]]:
        """Every (resource, span) received, in order."""
        with self.lock:
            return [
                (resource_spans.resource, span)
                for request in self.requests
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on 127.0.0.1 (a free port): POST /v1/traces with a protobuf
    ExportTraceServiceRequest, as the OpenTelemetry Collector takes it, and POST
    /v1development/profiles with an OTLP/JSON ExportProfilesServiceRequest."""
    receiver = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            profiles = self.path.endswith("/v1development/profiles")
            if profiles:
                assert self.headers.get("Content-Type") == "application/json"
                received: Any = profiles_json_to_request(body)
            else:
                assert self.headers.get("Content-Type") == "application/x-protobuf"
                received = ExportTraceServiceRequest()
                received.ParseFromString(body)
            with receiver.lock:
                receiver.paths.append(self.path)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                status = receiver.profiles_status if profiles else receiver.status
                if status == 200:
                    (receiver.profiles if profiles else receiver.requests).append(received)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep the test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)

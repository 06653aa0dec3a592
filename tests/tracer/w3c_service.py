"""A test service for the official W3C Trace Context test suite (https://github.com/w3c/trace-context,
folder test/; not part of this repository): the suite's harness sends it requests with
``traceparent`` and ``tracestate`` headers and reads the headers of the requests it makes back.

    python tests/tracer/w3c_service.py 5000
    cd /tmp/w3c && STRICT_LEVEL=2 SERVICE_ENDPOINT=http://127.0.0.1:5000/test python test.py

What the harness's README asks of a service: a POST's body is a JSON list of actions
``{"url": ..., "arguments": [...]}``; for each, POST ``arguments`` as JSON to ``url``. Here the
request's headers are continued (``tracer.continue_from``) and a traced call sends every action
with the headers ``tracer.inject`` writes, a fresh hand-off each. The tracer records into memory
(``tracer.testing.capture``): the service needs no repository. ``tests/tracer/
test_trace_context_level2.py`` runs the same handler in process.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import tracer
from tracer.testing import capture

HOST = "127.0.0.1"
TIMEOUT_S = 5.0  # the harness's own timeout for a test case

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def actions_of(body: bytes) -> list[dict[str, Any]]:
    """The actions a request body lists (one object counts as a list of one, as the harness's
    own server reads it); anything else is none."""
    value = json.loads(body) if body.strip() else None
    if isinstance(value, dict):
        value = [value]
    return [a for a in value if isinstance(a, dict)] if isinstance(value, list) else []


def post(url: str, arguments: object, headers: dict[str, str]) -> int:
    data = json.dumps(arguments).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    with NO_PROXY.open(request, timeout=TIMEOUT_S) as response:
        response.read()
        return int(response.status)


@tracer.traced
def call_back(actions: list[dict[str, Any]]) -> list[int]:
    """POST each action's arguments to its url, each request a hand-off of its own."""
    statuses = []
    for action in actions:
        headers = {"Content-Type": "application/json"}
        tracer.inject(headers, name="POST callback")
        statuses.append(post(str(action["url"]), action.get("arguments") or [], headers))
    return statuses


class W3CServiceHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            with tracer.continue_from(self.headers):  # every field of the request, in any case
                result: object = call_back(actions_of(body))
            status = 200
        except Exception as exc:  # the harness reports the status; the body says why
            result, status = f"{type(exc).__name__}: {exc}", 500
        reply = json.dumps(result).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print(f"usage: python {argv[0]} PORT", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer((HOST, int(argv[1])), W3CServiceHandler)
    print(
        f"W3C Trace Context test service on http://{HOST}:{server.server_address[1]}/test",
        flush=True,
    )
    with capture(), server, contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

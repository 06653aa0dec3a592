"""A chain of three services over HTTP, A → B → C: one sequence through three processes."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.support import (
    cmr_json,
    cmr_server,
    read_line,
    run_traced,
    shape,
    traced_env,
    write_script,
)

SERVICE = """
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import tracer

DOWNSTREAM = sys.argv[2] if len(sys.argv) > 2 else None

@tracer.traced(name=sys.argv[1] + ".handle")
def handle():
    return call(DOWNSTREAM) if DOWNSTREAM else sys.argv[1]

@tracer.traced(name=sys.argv[1] + ".call")
def call(url):
    headers = {}
    tracer.inject(headers)
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        return sys.argv[1] + ">" + r.read().decode()

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        with tracer.continue_from(self.headers):
            body = handle().encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    server.server_close()
"""

CLIENT = """
import sys
import urllib.request
import tracer

@tracer.traced(name="A.request")
def request(url):
    headers = {}
    tracer.inject(headers)
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        return "A>" + r.read().decode()

print(request(sys.argv[1]))
"""


@contextmanager
def service(script: Path, endpoint: str, *args: str) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, str(script), *args],
        env=traced_env(endpoint),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield f"http://127.0.0.1:{int(read_line(process, 60))}/"
    finally:
        process.send_signal(signal.SIGINT)  # the service stops and flushes what it traced
        process.wait(60)
        assert process.stdout is not None
        process.stdout.close()


def test_a_to_b_to_c_over_http_is_one_sequence(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    hop = write_script(tmp_path / "service.py", SERVICE)
    client = write_script(tmp_path / "client.py", CLIENT)
    with cmr_server(db) as endpoint, ExitStack() as services:
        c_url = services.enter_context(service(hop, endpoint, "C"))
        b_url = services.enter_context(service(hop, endpoint, "B", c_url))
        result = run_traced(client, endpoint, args=[b_url])
        assert result.stdout == "A>B>C\n"
    [summary] = cmr_json(db, "ls")
    assert summary["processes"] == 3
    root = cmr_json(db, "show", summary["seq"])["root"]
    assert shape(root) == {
        "name": "__main__.A.request",
        "status": "ok",
        "children": [
            {
                "name": "__main__.B.handle",
                "status": "ok",
                "children": [
                    {
                        "name": "__main__.B.call",
                        "status": "ok",
                        "children": [{"name": "__main__.C.handle", "status": "ok"}],
                    }
                ],
            }
        ],
    }
    b_handle = root["children"][0]
    c_handle = b_handle["children"][0]["children"][0]
    assert b_handle["handoff"]["kind"] == c_handle["handoff"]["kind"] == "remote"
    pids = {root["process"]["pid"], b_handle["process"]["pid"], c_handle["process"]["pid"]}
    assert len(pids) == 3

"""Issue 34, point 3, with a real application: a Flask view that starts a writer thread it does
not wait for, served by Flask's own server under ``tracer run`` and sending to a real
``cmr serve``. The request completes when its view returns (``cmr ls``: complete) while the
writer still runs, shown ``detached`` under the view; the writer's later call, after another
request releases it, joins the first request's sequence."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    cmr,
    cmr_json,
    cmr_server,
    free_port,
    own_session,
    traced_env,
    wait_for,
    write_script,
)

pytestmark = pytest.mark.system

APP = """
import sys

from flask import Flask

import orders

app = Flask(__name__)


@app.route("/write")
def write():
    orders.start_writer()
    return "started"


@app.route("/release")
def release():
    orders.release()
    return "released"


if __name__ == "__main__":
    app.run("127.0.0.1", int(sys.argv[1]))
"""

ORDERS = """
import threading

released = threading.Event()


def record(line):
    return len(line)


def writer():
    record("first")
    released.wait(120)  # the test's second request sets it
    record("later")


def start_writer():
    threading.Thread(target=writer, name="writer", daemon=True).start()


def release():
    released.set()
"""


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def get(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def nodes(root: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tree's nodes by name (the first of each name, depth first)."""
    found: dict[str, dict[str, Any]] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        found.setdefault(node["name"], node)
        stack.extend(reversed(node["children"]))
    return found


def test_a_flask_request_that_starts_a_writer_thread_completes(tmp_path: Path) -> None:
    write_script(tmp_path / "app.py", APP)
    write_script(tmp_path / "orders.py", ORDERS)
    db = tmp_path / "cmr.sqlite"
    port = free_port()
    log = tmp_path / "server.log"
    command = [sys.executable, "-m", "tracer", "run", "--no-report", "--include", "orders"]
    command += ["app.py", str(port)]
    with cmr_server(db) as endpoint, log.open("w") as output:
        env = traced_env(endpoint, INVOSEQ_SPOOL_DIR=str(tmp_path / "spool"))
        with own_session(
            command, cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT
        ) as run:

            def ready() -> bool:
                assert run.poll() is None, log.read_text()
                return listening(port)

            wait_for(ready, timeout_s=90, interval_s=0.05)
            assert get(port, "/write") == 200

            def request_line() -> dict[str, Any] | None:
                rows = [r for r in cmr_json(db, "ls") if "/write" in r["root"]]
                return rows[0] if rows and rows[0]["status"] == "complete" else None

            line = wait_for(request_line, 60)

            def writer_shown() -> dict[str, Any] | None:  # the writer's batch may come later
                shown = cmr_json(db, "show", line["seq"])
                return shown if "orders.writer" in nodes(shown["root"]) else None

            shown = wait_for(writer_shown, 60)
            # Complete while the writer still runs: it is detached under the view.
            assert shown["status"] == "complete"
            writer = nodes(shown["root"])["orders.writer"]
            assert (writer["status"], writer["detached"], writer["handoff"]["kind"]) == (
                "running",
                True,
                "thread",
            )
            assert "orders.start_writer" in nodes(shown["root"])
            text = cmr(db, "show", line["seq"]).stdout
            assert "detached" in next(t for t in text.splitlines() if "orders.writer" in t)

            assert get(port, "/release") == 200  # a request of its own releases the writer

            def writer_ended() -> dict[str, Any] | None:
                shown = cmr_json(db, "show", line["seq"])
                writer = nodes(shown["root"])["orders.writer"]
                return shown if writer["status"] == "ok" and len(writer["children"]) == 2 else None

            shown = wait_for(writer_ended, 60)
            writer = nodes(shown["root"])["orders.writer"]
            assert [c["name"] for c in writer["children"]] == ["orders.record"] * 2
            assert (shown["status"], writer["detached"]) == ("complete", True)
            (after,) = [r for r in cmr_json(db, "ls") if r["seq"] == line["seq"]]
            assert (after["status"], after["duration_ns"]) == ("complete", line["duration_ns"])
            run.send_signal(signal.SIGINT)
            run.wait(60)

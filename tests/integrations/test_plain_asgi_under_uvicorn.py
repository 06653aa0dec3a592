"""An ASGI application with a router of its own (no framework invoseq knows), run unchanged under
``tracer run -m uvicorn``, as its users start it: uvicorn's hook measures each request, named by
its method and path template, with its status; a 4xx is not an error, a 5xx is."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.support import cmr_json, own_session, wait_for, write_script

APP = """
import json

import orders

ROUTES = {"orders": orders.one, "health": orders.health}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    parts = scope["path"].strip("/").split("/")
    if parts[0] == "boom":
        raise RuntimeError("boom")
    handler = ROUTES.get(parts[0])
    status, body = (404, "no such route") if handler is None else handler(parts[1:])
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
"""

ORDERS = """
def one(rest):
    if not rest or not rest[0].isdigit():
        return 400, "an order number, please"
    return 200, price(int(rest[0]))


def price(number):
    return number * 3


def health(rest):
    return 200, "ok"
"""

#: (path, status): ten requests to seven paths.
REQUESTS = [
    ("/orders/1", 200),
    ("/orders/2", 200),
    ("/orders/3", 200),
    ("/orders/x", 400),
    ("/health", 200),
    ("/health", 200),
    ("/nowhere", 404),
    ("/nowhere/else", 404),
    ("/boom", 500),
    ("/orders/7", 200),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def status_of(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_each_request_is_one_sequence_named_by_method_and_path_template(tmp_path: Path) -> None:
    write_script(tmp_path / "app.py", APP)
    write_script(tmp_path / "orders.py", ORDERS)
    port = free_port()
    log = tmp_path / "uvicorn.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_DB=str(tmp_path / "cmr.sqlite"), INVOSEQ_SPOOL_DIR=str(tmp_path / "spool"))
    command = [sys.executable, "-m", "tracer", "run", "--no-report", "--include", "orders"]
    command += ["-m", "uvicorn", "app:app", "--port", str(port), "--host", "127.0.0.1"]
    with (
        log.open("w") as output,
        own_session(
            command, cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT
        ) as server,
    ):

        def ready() -> bool:
            assert server.poll() is None, log.read_text()
            return "Uvicorn running on" in log.read_text()

        wait_for(ready, timeout_s=90, interval_s=0.05)
        assert [status_of(port, path) for path, _ in REQUESTS] == [s for _, s in REQUESTS]
        server.send_signal(signal.SIGINT)
        assert server.wait(60) == 0, log.read_text()
    listed = cmr_json(tmp_path / "cmr.sqlite", "ls", "--limit", "100")
    requests = sorted(
        (row["root"], row["error"]) for row in listed if row["root"].startswith("asgi.")
    )
    assert requests == sorted(
        [
            ("asgi.GET /orders/{int}", None),
            ("asgi.GET /orders/{int}", None),
            ("asgi.GET /orders/{int}", None),
            ("asgi.GET /orders/x", None),  # a 400: not an error
            ("asgi.GET /health", None),
            ("asgi.GET /health", None),
            ("asgi.GET /nowhere", None),  # a 404: not an error
            ("asgi.GET /nowhere/else", None),
            ("asgi.GET /boom", "RuntimeError"),  # the exception uvicorn answered with a 500
            ("asgi.GET /orders/{int}", None),
        ]
    )
    numbered = [row for row in listed if row["root"] == "asgi.GET /orders/{int}"]
    assert {row["invocations"] for row in numbered} == {3}  # the request, one, price

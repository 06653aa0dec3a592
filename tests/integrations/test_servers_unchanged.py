"""A web application with a router of its own (no framework invoseq knows), run unchanged under
``tracer run`` by each server as its users start it (uvicorn, hypercorn, daphne; gunicorn sync
and gthread, waitress, werkzeug's server, wsgiref): the server's hook measures each request, named
by its method and path template, with its status; a 4xx is not an error, a 5xx or an exception
is; the application's traced calls are its children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import (
    cmr_json,
    free_port,
    http_get,
    listening,
    own_session,
    wait_for,
    write_script,
)

ROUTER = """
import orders

orders.warm()  # a traced call at import time: start-up's, not a request's

ROUTES = {"orders": orders.one, "health": orders.health}


def route(path):
    parts = path.strip("/").split("/")
    if parts[0] == "boom":
        raise RuntimeError("boom")
    handler = ROUTES.get(parts[0])
    return (404, "no such route") if handler is None else handler(parts[1:])
"""

ASGI_APP = (
    ROUTER
    + """

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    status, body = route(scope["path"])
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": body.encode()})
"""
)

WSGI_APP = (
    ROUTER
    + """

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


def app(environ, start_response):
    status, body = route(environ["PATH_INFO"])
    start_response(f"{status} {REASONS[status]}", [("Content-Type", "text/plain")])
    return [body.encode()]
"""
)

ORDERS = """
def one(rest):
    if not rest or not rest[0].isdigit():
        return 400, "an order number, please"
    return 200, str(price(int(rest[0])))


def price(number):
    return number * 3


def health(rest):
    return 200, "ok"


def warm():
    return price(1)
"""

SERVE_WERKZEUG = """
import sys

from werkzeug.serving import run_simple

from app import app

run_simple("127.0.0.1", int(sys.argv[1]), app)
"""

SERVE_WSGIREF = """
import sys
from wsgiref.simple_server import make_server

from app import app

# wsgiref's handler takes a KeyboardInterrupt for the request's error and goes on: a signal
# cannot stop it reliably, so it serves the test's requests and ends
with make_server("127.0.0.1", int(sys.argv[1]), app) as server:
    for _ in range(int(sys.argv[2])):
        server.handle_request()
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


@dataclass(frozen=True)
class Server:
    id: str
    kind: str  # "asgi" or "wsgi": the application it serves, and its requests' module
    command: tuple[str, ...]  # after `tracer run`; {port} replaced
    stop: signal.Signals | None = signal.SIGINT  # None: it ends by itself
    startup: str | None = None  # the service sequence its loading the application is
    lifespan: bool = False  # it runs the ASGI lifespan


SERVERS = [
    Server(
        "uvicorn",
        "asgi",
        ("-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", "{port}"),
        startup="uvicorn.startup",
        lifespan=True,
    ),
    Server(
        "hypercorn",
        "asgi",
        ("-m", "hypercorn", "app:app", "--bind", "127.0.0.1:{port}"),
        startup="hypercorn.startup",
        lifespan=True,
    ),
    Server(
        "daphne",
        "asgi",
        ("-m", "daphne", "-b", "127.0.0.1", "-p", "{port}", "app:app"),
        startup="daphne.startup",
    ),
    Server(
        "gunicorn_sync",
        "wsgi",
        ("-m", "gunicorn", "-k", "sync", "-w", "1", "-b", "127.0.0.1:{port}", "app:app"),
        signal.SIGTERM,
        startup="gunicorn.startup",
    ),
    Server(
        "gunicorn_gthread",
        "wsgi",
        ("-m", "gunicorn", "-k", "gthread", "--threads", "2", "-b", "127.0.0.1:{port}", "app:app"),
        signal.SIGTERM,
        startup="gunicorn.startup",
    ),
    Server("waitress", "wsgi", ("-m", "waitress", "--listen=127.0.0.1:{port}", "app:app")),
    Server("werkzeug", "wsgi", ("serve_werkzeug.py", "{port}")),
    Server(
        "wsgiref", "wsgi", ("serve_wsgiref.py", "{port}", str(len(REQUESTS) + 1)), None
    ),  # + the probe
]


@pytest.mark.parametrize("server", SERVERS, ids=lambda server: server.id)
def test_each_request_is_one_sequence_named_by_method_and_path_template(
    tmp_path: Path, server: Server
) -> None:
    write_script(tmp_path / "app.py", ASGI_APP if server.kind == "asgi" else WSGI_APP)
    write_script(tmp_path / "orders.py", ORDERS)
    write_script(tmp_path / "serve_werkzeug.py", SERVE_WERKZEUG)
    write_script(tmp_path / "serve_wsgiref.py", SERVE_WSGIREF)
    port = free_port()
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_DB=str(tmp_path / "cmr.sqlite"), INVOSEQ_SPOOL_DIR=str(tmp_path / "spool"))
    command = [sys.executable, "-m", "tracer", "run", "--no-report", "--include", "orders"]
    command += [part.replace("{port}", str(port)) for part in server.command]
    with (
        log.open("w") as output,
        own_session(command, cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT) as run,
    ):

        def ready() -> bool:
            assert run.poll() is None, log.read_text()
            return listening(port)

        wait_for(ready, timeout_s=90, interval_s=0.05)
        assert [http_get(port, path)[0] for path, _ in REQUESTS] == [s for _, s in REQUESTS]
        if server.stop is not None:
            run.send_signal(server.stop)
        try:  # its own exit status (a KeyboardInterrupt's, for some): the trace is sent
            run.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after the requests:\n{log.read_text()}")
    db = tmp_path / "cmr.sqlite"
    listed = cmr_json(db, "ls", "--limit", "100")
    module = server.kind + "."
    requests = sorted(
        (row["root"], row["error"]) for row in listed if row["root"].startswith(module)
    )
    assert requests == sorted(
        [
            (module + "GET /orders/{int}", None),
            (module + "GET /orders/{int}", None),
            (module + "GET /orders/{int}", None),
            (module + "GET /orders/x", None),  # a 400: not an error
            (module + "GET /health", None),
            (module + "GET /health", None),
            (module + "GET /nowhere", None),  # a 404: not an error
            (module + "GET /nowhere/else", None),
            (module + "GET /boom", "RuntimeError"),  # the server answered it with a 500
            (module + "GET /orders/{int}", None),
        ]
    ), log.read_text()
    numbered = [row for row in listed if row["root"] == module + "GET /orders/{int}"]
    assert {row["invocations"] for row in numbered} == {3}  # the request, one, price
    # the call at import time: under the server's start-up where a hook loads the application,
    # else under the program's import of it (nothing was current): never a sequence of its own
    assert [row["root"] for row in listed if not row["root"].startswith(module)] == []
    service = {row["root"]: row for row in cmr_json(db, "ls", "--kind", "service")}
    loading = f"invoseq.service.{server.startup or 'import'}"
    assert service[loading]["invocations"] == 3  # the service itself, warm, price
    expected = {loading}
    if server.lifespan:
        expected.add("invoseq.service.asgi.lifespan")
    assert set(service) == expected

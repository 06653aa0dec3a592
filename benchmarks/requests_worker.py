"""The in-process half of case ``requests``: one service's application called directly, as its
server calls it, in chunks timed on this thread's CPU clock.

``python [-m tracer run --include APP] -m benchmarks.requests_worker '<JSON parameters>'``:
``kind`` ("flask" or "fastapi"), ``workdir`` (where the case wrote the apps), ``calls`` (the
route's traced calls), ``chunks`` and ``per_chunk``. Reports each chunk's CPU µs a request, sorted:
a chunk the machine's other load preempted is not charged for the wait (``time.thread_time``),
and the low ones are the request path's own cost.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.processes import report_result, worker_params


def _wsgi(app: Any, path: str) -> Callable[[], None]:
    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        return None

    def one() -> None:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1",
            "REMOTE_ADDR": "127.0.0.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(),
            "wsgi.errors": sys.stderr,
            "wsgi.version": (1, 0),
            "wsgi.multithread": False,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        body = app(environ, start_response)
        for _ in body:
            pass
        close = getattr(body, "close", None)
        if close is not None:
            close()

    return one


def _asgi(app: Any, path: str, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 5000),
        "scheme": "http",
        "method": "GET",
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"accept", b"*/*")],
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    def one() -> None:
        loop.run_until_complete(app(dict(scope), receive, send))

    return one


def main() -> None:
    params = worker_params()
    sys.path.insert(0, params["workdir"])
    kind = params["kind"]
    app = importlib.import_module(f"req_{kind}").app
    path = f"/calls/{params['calls']}"
    loop = asyncio.new_event_loop()
    one = _wsgi(app, path) if kind == "flask" else _asgi(app, path, loop)
    per_chunk = int(params["per_chunk"])
    for _ in range(per_chunk * 3):  # warm-up: imports, caches, the sender's start
        one()
    chunks = []
    for _ in range(int(params["chunks"])):
        started = time.thread_time_ns()
        for _ in range(per_chunk):
            one()
        chunks.append((time.thread_time_ns() - started) / 1000 / per_chunk)
    loop.close()
    report_result({"chunks": sorted(chunks)})


if __name__ == "__main__":
    main()

"""Real web servers started as their users start them, under ``tracer run``, sending to a real
``cmr serve``; and the trees they leave, read back with ``cmr show --json``."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support import cmr_json, traced_env

#: Only what the test itself does goes into the repository: no client call of the test process.
TRACEPARENT = "00-{seq}-00f067aa0ba902b7-01"


def wait_until_listening(port: int, process: subprocess.Popen[str], timeout_s: float) -> None:
    """Until something accepts connections on ``port`` (bounded; fails at once if the server
    exits)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _, stderr = process.communicate(timeout=10)
            raise AssertionError(f"{process.args!r} exited {process.returncode}: {stderr}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {timeout_s} s")


@contextmanager
def traced_server(
    cwd: Path, endpoint: str, include: str, command: list[str], port: int, *, stop: int
) -> Iterator[subprocess.Popen[str]]:
    """``tracer run --include INCLUDE COMMAND`` in ``cwd``, sending to ``endpoint``, until it
    listens on ``port``; stopped with signal ``stop`` afterwards (the server's own graceful
    shutdown, which flushes what it traced), its whole process group killed if it hangs."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tracer", "run", "--include", include, *command],
        cwd=cwd,
        env=traced_env(endpoint, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_until_listening(port, process, timeout_s=90)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(stop)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate(timeout=10)
            raise AssertionError(f"{command!r} did not stop: {stderr}") from None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        assert "Traceback" not in stderr, stderr


def get(url: str, traceparent: str | None = None) -> str:
    headers = {"traceparent": traceparent} if traceparent else {}
    request = urllib.request.Request(url, headers={**headers, "Connection": "close"})
    with urllib.request.urlopen(request, timeout=60) as response:
        body: bytes = response.read()
        return body.decode()


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node["children"]:
        yield from nodes(child)


def trees(db: Path) -> dict[str, dict[str, Any]]:
    """Every stored sequence's root node, by sequence id."""
    return {s["seq"]: cmr_json(db, "show", s["seq"])["root"] for s in cmr_json(db, "ls")}


def named(root: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [node for node in nodes(root) if node["name"] == name]


def pid(node: dict[str, Any]) -> int:
    value: int = node["process"]["pid"]
    return value

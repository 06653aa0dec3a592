"""A real redis-server for the task-queue tests: Debian's, on 127.0.0.1 on a free port, with no
persistence, started by the test and stopped after it."""

from __future__ import annotations

import gc
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import requirements


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def redis_url(directory: Path, timeout_s: float = 30) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` of a server running for the block (its files in
    ``directory``); it answers PING before the block starts."""
    server = requirements.redis_server()
    port = _free_port()
    process = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(directory), "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout_s
        while not _answers(port):
            if process.poll() is not None:
                raise AssertionError(
                    f"redis-server exited: {process.stderr and process.stderr.read()!r}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not answer within {timeout_s} s")
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        # Clients the block left in reference cycles (Celery's AsyncResult) are finalized now,
        # while the server answers: collected later, on whichever thread allocated (the tracer's
        # sampler or sender, seen in CI), their finalizers retry a dead server for 20 s.
        gc.collect()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False

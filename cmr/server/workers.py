"""``cmr serve --workers N``: one endpoint, N processes decoding and storing batches.

The main process keeps the ROUTER every traced process connects to (CURVE and its
authenticator live there) and binds a DEALER on a private ipc endpoint; N worker processes
(``python -m cmr.server.workers``) each open the repository and connect a DEALER to it. The main
process forwards each message, with its sender's identity, to the next worker with room (DEALER:
round robin) and each answer back (the ROUTER routes it by that identity). A worker is an Ingest
on its own store, so decoding and packing run on every core and only the store's commit is
taken in turn (SQLite's write lock; PostgreSQL's rows). Batches of one process may be stored by
different workers, in any order: every store takes any order of arrival, and a batch sent twice
is stored once. A worker that dies loses only the batch it was storing, unacknowledged, so the
sender sends it again; the main process starts another worker in its place.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Final

import msgspec
import zmq

from cmr.defaults import DB_ENV
from cmr.server.groups import take_waiting
from cmr.server.ingest import Ingest
from cmr.store import StoreError, open_store
from invoseq import wire

log = logging.getLogger(__name__)

#: What a worker sends once its store is open; ``FAILED`` and a message if it cannot open it.
READY: Final = b"invoseq-worker-ready"
FAILED: Final = b"invoseq-worker-failed"
#: How long the main process waits for every worker to open the repository.
START_TIMEOUT_S: Final = 60.0
#: How long a stopping worker may take to finish the batch in hand before it is killed.
STOP_TIMEOUT_S: Final = 10.0
#: How long forwarding a message may wait for a worker with room before the message is dropped
#: (unacknowledged: its sender sends it again).
FORWARD_TIMEOUT_MS: Final = 1_000
#: How often a worker looks at its stop flag and its parent when no message arrives.
POLL_MS: Final = 100


class WorkerError(Exception):
    """The workers could not start: a one-line message."""


class WorkerPool:
    """N worker processes behind a DEALER; serve it from the server's thread only."""

    def __init__(self, count: int, db: str, *, max_frame_bytes: int = wire.MAX_FRAME_BYTES):
        if count < 2:
            raise ValueError("a pool has two workers or more")
        self.count = count
        self._db = db
        self._max_frame_bytes = max_frame_bytes
        self._dir = tempfile.TemporaryDirectory(prefix="invoseq-workers-")
        self._endpoint = f"ipc://{Path(self._dir.name) / 'workers.sock'}"
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.socket: zmq.Socket[bytes] = self._context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDTIMEO, FORWARD_TIMEOUT_MS)
        self.socket.bind(self._endpoint)
        self._workers: list[subprocess.Popen[bytes]] = []
        self._stopping = False

    def start(self) -> None:
        """Start every worker and wait until each has opened the repository. Raises
        WorkerError (the workers started are stopped)."""
        try:
            for _ in range(self.count):
                self._workers.append(self._spawn())
            ready = 0
            deadline = time.monotonic() + START_TIMEOUT_S
            while ready < self.count:
                ready += self._await_ready(deadline)
        except BaseException:
            self.close()
            raise

    def _await_ready(self, deadline: float) -> int:
        """1 when the next message is a worker's READY, 0 for anything else; raises WorkerError
        for a worker that failed, or at ``deadline``."""
        left_ms = int(1000 * (deadline - time.monotonic()))
        if left_ms <= 0 or not self.socket.poll(left_ms):
            raise WorkerError(f"the workers did not start within {START_TIMEOUT_S:.0f} s")
        message = self.socket.recv_multipart()
        if message[0] == FAILED:
            raise WorkerError(message[1].decode("utf-8", "replace"))
        return int(message[0] == READY)

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ, **{DB_ENV: self._db})
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cmr.server.workers",
                self._endpoint,
                str(self._max_frame_bytes),
                str(os.getpid()),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
        )

    def forward(self, message: list[bytes]) -> None:
        """Hand a message from the ROUTER ([identity, header, body]) to a worker."""
        try:
            self.socket.send_multipart(message)
        except zmq.Again:  # every worker's queue is full for a second: the sender resends
            log.warning("no worker took a message within %d ms: dropped", FORWARD_TIMEOUT_MS)

    def answer(self, router: zmq.Socket[bytes]) -> None:
        """Send the workers' answers waiting on the DEALER back through the ROUTER."""
        while True:
            try:
                message = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(message) != 3:  # a replacement worker's READY
                continue
            try:
                router.send_multipart(message, zmq.NOBLOCK)
            except zmq.ZMQError as exc:  # the peer is gone or not reading: it will send again
                log.warning("cannot acknowledge a batch: %s", exc)

    def supervise(self) -> None:
        """Replace a worker that exited (its unacknowledged batch will be sent again)."""
        if self._stopping:
            return
        for at, worker in enumerate(self._workers):
            code = worker.poll()
            if code is not None:
                log.warning("worker %d exited with code %d: starting another", worker.pid, code)
                self._workers[at] = self._spawn()

    def pids(self) -> list[int]:
        return [worker.pid for worker in self._workers]

    def close(self) -> None:
        """Stop every worker (each finishes the batch in hand), then close the socket."""
        self._stopping = True
        for worker in self._workers:
            if worker.poll() is None:
                worker.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for worker in self._workers:
            try:
                worker.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        self._workers = []
        self.socket.close(linger=0)
        self._context.term()
        self._dir.cleanup()


def serve_worker(endpoint: str, max_frame_bytes: int, parent: int) -> int:
    """A worker: store what the main process forwards, answer each batch, until SIGTERM (or
    the main process is gone)."""
    stop = False

    def request_stop(signum: int, frame: types.FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the main process, which stops us
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 1_000)
    sock.connect(endpoint)
    try:
        try:
            store = open_store(None)
        except StoreError as exc:
            sock.send_multipart([FAILED, str(exc).encode()])
            return 1
        try:
            store.share_writes()  # the other workers write the same repository
            ingest = Ingest(store, max_frame_bytes=max_frame_bytes)
            encode = msgspec.msgpack.Encoder().encode
            sock.send_multipart([READY])
            while not stop and os.getppid() == parent:
                if not sock.poll(POLL_MS):
                    continue
                group = take_waiting(sock)
                acks = ingest.handle_many([message[1:] for message in group])
                for message, ack in zip(group, acks, strict=True):
                    if ack is not None:
                        sock.send_multipart([message[0], wire.ACK_HEADER, encode(ack)])
        finally:
            store.close()
        return 0
    finally:
        sock.close()
        context.term()


def main(argv: list[str] | None = None) -> int:
    """``python -m cmr.server.workers ENDPOINT MAX_FRAME_BYTES PARENT_PID`` (``INVOSEQ_DB``
    names the repository): started by ``cmr serve --workers N``, not by hand."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print(main.__doc__, file=sys.stderr)
        return 2
    logging.basicConfig(format="cmr worker: %(message)s")
    return serve_worker(args[0], int(args[1]), int(args[2]))


if __name__ == "__main__":
    sys.exit(main())

"""The repository's network front: a ZeroMQ ROUTER that stores batches and acknowledges them.

Traced processes connect DEALER sockets and send [header, body]; the ROUTER sees [identity, header,
body] and answers [identity, ack header, Ack] on the same connection once the batch is stored.
One thread serves the socket; it polls with a short timeout so a stop request (a signal in
`cmr serve`, ``ServerThread.stop`` in tests) ends it promptly. With CURVE keys
(``cmr.server.curve``) the socket is a CURVE server, a ZAP authenticator decides which client keys
may connect, and the same thread counts the handshakes it refused.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Final

import msgspec
import zmq

from cmr.defaults import DB_ENV, DEFAULT_DB_PATH, READY_PREFIX
from cmr.server.curve import CurveError, CurveKeys, Gatekeeper, curve_keys
from cmr.server.groups import GROUP_BATCHES, filled, take_waiting
from cmr.server.ingest import AUTH, Ingest
from cmr.server.wakeup import Wakeup
from cmr.server.workers import WorkerError, WorkerPool
from cmr.store import Store, StoreError, open_store, repository_target
from invoseq import wire

log = logging.getLogger(__name__)

#: How often the serving loop looks at its stop event when no message arrives.
POLL_MS: Final = 100
#: Messages handled between two looks at the stop event under a continuous load.
_DRAIN: Final = 1000
#: libzmq drops a connection that sends a frame above this many times the frame limit, before the
#: frame reaches us (so it cannot be counted); frames between the limit and this are received,
#: counted as ``oversized`` and dropped. The factor bounds the memory one frame can take.
HARD_LIMIT_FACTOR: Final = 2


class ServerError(Exception):
    """The server could not start (address in use, bad endpoint): a one-line message."""


class Server:
    """A ROUTER socket bound to ``bind`` that feeds an Ingest. Serve it from one thread only.

    With ``curve``, only clients whose public key is in ``curve.allowed_clients`` can connect,
    over encrypted connections."""

    def __init__(
        self,
        store: Store,
        bind: str,
        *,
        max_frame_bytes: int = wire.MAX_FRAME_BYTES,
        curve: CurveKeys | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        self.bind = bind
        self.max_frame_bytes = max_frame_bytes
        self.curve = curve
        #: With a pool, its workers decode and store; ``store`` only counts refused handshakes.
        self.pool = pool
        self._ingest = Ingest(store, max_frame_bytes=max_frame_bytes)
        self._encoder = msgspec.msgpack.Encoder()
        self._context: zmq.Context[zmq.Socket[bytes]] | None = None
        self._socket: zmq.Socket[bytes] | None = None
        self._gatekeeper: Gatekeeper | None = None
        self._endpoint: str | None = None
        self._wakeup: Wakeup | None = None

    @property
    def endpoint(self) -> str:
        """The endpoint actually bound (a ``*`` port resolved), for clients to connect to."""
        if self._endpoint is None:
            raise RuntimeError("the server is not started")
        return self._endpoint

    def start(self) -> None:
        """Bind the socket. Raises ServerError."""
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        gatekeeper = None
        if self.curve is not None:
            # Before the socket binds: a CURVE server without a ZAP handler admits every key.
            gatekeeper = Gatekeeper(context, self.curve)
            gatekeeper.start()
            if not self.curve.allowed:
                log.warning(
                    "%s holds no client public key (*.key): every client will be refused",
                    self.curve.allowed_clients,
                )
        sock = context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, HARD_LIMIT_FACTOR * self.max_frame_bytes)
        try:
            if gatekeeper is not None:
                gatekeeper.secure(sock)
            sock.bind(self.bind)
        except zmq.ZMQError as exc:
            if gatekeeper is not None:
                gatekeeper.unwatch()
            sock.close()
            if gatekeeper is not None:
                gatekeeper.close()
            context.term()
            raise ServerError(_bind_error(self.bind, exc)) from exc
        self._context, self._socket, self._gatekeeper = context, sock, gatekeeper
        self._endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._wakeup = Wakeup()

    def wake(self) -> None:
        """End the current poll now (a stop was asked for): from any thread or a signal
        handler."""
        if self._wakeup is not None:
            self._wakeup.wake()

    @property
    def signal_fd(self) -> int | None:
        """The wake-up pipe's write end, for ``signal.set_wakeup_fd`` (``Wakeup``)."""
        return self._wakeup.signal_fd if self._wakeup is not None else None

    def serve(self, stop: threading.Event) -> None:
        """Answer messages until ``stop`` is set."""
        sock = self._socket
        if sock is None:
            raise RuntimeError("start() the server before serve()")
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        gatekeeper = self._gatekeeper
        monitor = gatekeeper.monitor if gatekeeper is not None else None
        if monitor is not None:
            poller.register(monitor, zmq.POLLIN)
        pool = self.pool
        if pool is not None:
            poller.register(pool.socket, zmq.POLLIN)
        wakeup = self._wakeup
        if wakeup is not None:
            poller.register(wakeup.fd, zmq.POLLIN)
        while not stop.is_set():
            ready = dict(poller.poll(POLL_MS))
            if wakeup is not None and wakeup.fd in ready:
                wakeup.clear()
            if monitor is not None and monitor in ready and gatekeeper is not None:
                refused = gatekeeper.refusals()
                if refused:
                    self._ingest.reject(AUTH, refused)
            if pool is not None:
                if pool.socket in ready:
                    pool.answer(sock)
                pool.supervise()
            if sock in ready:
                self._drain(sock)

    def _drain(self, sock: zmq.Socket[bytes]) -> None:
        """Handle (or hand to the workers) the messages waiting, up to _DRAIN; without workers,
        those waiting are stored a group at a time (``groups``)."""
        pool = self.pool
        for _ in range(_DRAIN // GROUP_BATCHES):
            group = take_waiting(sock)
            if pool is not None:
                for message in group:
                    pool.forward(message)
            elif group:
                self._answer(sock, group)
            if not filled(group):
                return

    def _answer(self, sock: zmq.Socket[bytes], group: list[list[bytes]]) -> None:
        try:
            acks = self._ingest.handle_many([message[1:] for message in group])
        except Exception:  # Ingest never raises; this keeps the server alive if it ever does
            log.exception("unexpected failure handling %d message(s)", len(group))
            return
        for message, ack in zip(group, acks, strict=True):
            if ack is not None:
                self._acknowledge(sock, message[0], ack)

    def _acknowledge(self, sock: zmq.Socket[bytes], identity: bytes, ack: wire.Ack) -> None:
        try:
            sock.send_multipart([identity, wire.ACK_HEADER, self._encoder.encode(ack)], zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # the peer is gone or not reading: it will send again
            log.warning(
                "cannot acknowledge batch %d of process %x: %s", ack.batch_no, ack.puid, exc
            )

    def close(self) -> None:
        """Close the socket, stop the workers and the authenticator (call from the thread that
        served it, or after it stopped)."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self._gatekeeper is not None:
            self._gatekeeper.unwatch()
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if self._gatekeeper is not None:
            self._gatekeeper.close()
            self._gatekeeper = None
        if self._context is not None:
            self._context.term()
            self._context = None
        if self._wakeup is not None:
            self._wakeup.close()


class ServerThread:
    """A started Server serving from a background thread: the embedded repository and tests.

    ``curve``: as for ``cmr serve --curve-secret FILE --allowed-clients DIR``, which
    ``CurveKeys.load(FILE, DIR)`` reads. The store stays the caller's to close."""

    def __init__(
        self,
        store: Store,
        bind: str,
        *,
        max_frame_bytes: int = wire.MAX_FRAME_BYTES,
        curve: CurveKeys | None = None,
    ) -> None:
        self._server = Server(store, bind, max_frame_bytes=max_frame_bytes, curve=curve)
        self._server.start()
        store.serving()
        self.endpoint = self._server.endpoint
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cmr-server", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._server.serve(self._stop)
        finally:
            self._server.close()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._server.wake()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the server thread did not stop within {timeout} s")

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def run_server(
    store: Store,
    bind: str,
    ready_line: bool = True,
    *,
    curve: CurveKeys | None = None,
    workers: int = 1,
    db: str | None = None,
) -> int:
    """Serve until SIGINT or SIGTERM, then close ``store``; the exit code of `cmr serve`.

    With ``workers`` > 1, that many processes open the repository ``db`` (``store`` must be
    it) and store the batches (``cmr.server.workers``). After binding and starting them, prints
    exactly one line, ``cmr: listening on <endpoint>``, that other tools wait for. A failure to
    start prints a one-line error to stderr and returns 1."""
    server = Server(store, bind, curve=curve)
    try:
        try:
            server.start()
            if workers > 1:
                server.pool = _started_pool(workers, db, server.max_frame_bytes)
            else:  # this process writes the store (the workers say so of theirs)
                store.serving()
        except (ServerError, WorkerError) as exc:
            print(f"cmr: {exc}", file=sys.stderr)
            return 1
        stop = threading.Event()
        with _stop_on_signals(stop, server.wake, server.signal_fd):
            if ready_line:
                print(f"{READY_PREFIX}{server.endpoint}", flush=True)
            server.serve(stop)
        return 0
    finally:
        server.close()
        store.close()


def _started_pool(workers: int, db: str | None, max_frame_bytes: int) -> WorkerPool:
    if db is None:
        raise ServerError("workers need the repository's path or URL")
    pool = WorkerPool(workers, db, max_frame_bytes=max_frame_bytes)
    pool.start()
    return pool


@contextlib.contextmanager
def _stop_on_signals(
    stop: threading.Event, wake: Callable[[], None], signal_fd: int | None = None
) -> Iterator[None]:
    """Turn SIGINT and SIGTERM into ``stop.set()`` and ``wake()`` (only the main thread may
    install handlers), once: ``Event.set`` and ``wake`` take a lock, and a second signal whose
    handler ran while the first held it (Python runs handlers between any two bytecodes of the
    main thread) would wait for it forever. A ``tracer run`` killed outright sends its
    repository two SIGTERMs at once (its own and the parent-death signal): CI found such a
    repository still running, deadlocked.

    ``signal_fd`` (the poll's wake-up pipe) becomes the signal wakeup fd meanwhile: the Python
    handler may run only after the poll has begun waiting (``cmr.server.wakeup``), and CI found
    a `cmr serve` still polling 30 s after its SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_fd = (
        None if signal_fd is None else signal.set_wakeup_fd(signal_fd, warn_on_full_buffer=False)
    )
    requested: list[int] = []

    def request_stop(signum: int, frame: types.FrameType | None) -> None:
        if requested:
            return
        requested.append(signum)
        stop.set()
        wake()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if previous_fd is not None:
            signal.set_wakeup_fd(previous_fd)


def _bind_error(bind: str, exc: zmq.ZMQError) -> str:
    reason = zmq.strerror(exc.errno) if exc.errno is not None else str(exc)
    message = f"cannot listen on {bind}: {reason}"
    if exc.errno in {errno.EINVAL, errno.EPROTONOSUPPORT}:
        message += " (expected tcp://HOST:PORT or ipc://PATH)"
    return message


def main(argv: list[str] | None = None) -> int:
    """``python -m cmr.server``: `cmr serve` without the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="python -m cmr.server", description=main.__doc__)
    parser.add_argument("--bind", required=True, help="endpoint, e.g. tcp://127.0.0.1:*")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", help=f"repository file (default: ${DB_ENV}, else {DEFAULT_DB_PATH})")
    where.add_argument("--memory", action="store_true", help="keep the repository in memory")
    parser.add_argument("--curve-secret", metavar="FILE", help="the repository's secret key file")
    parser.add_argument("--allowed-clients", metavar="DIR", help="the allowed client public keys")
    parser.add_argument("--workers", type=int, default=1, help="processes storing (not --memory)")
    args = parser.parse_args(argv)
    if args.workers < 1 or (args.memory and args.workers > 1):
        parser.error("--workers takes 1 or more, and more than 1 needs --db")
    logging.basicConfig(format="cmr: %(message)s")
    try:
        curve = curve_keys(args.curve_secret, args.allowed_clients)
        store = open_store(args.db, memory=args.memory)
    except (CurveError, StoreError) as exc:
        print(f"cmr: {exc}", file=sys.stderr)
        return 1
    db = None if args.memory else repository_target(args.db)
    return run_server(store, args.bind, curve=curve, workers=args.workers, db=db)

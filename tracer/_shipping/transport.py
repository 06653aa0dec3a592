"""How batches leave the process: a ZeroMQ DEALER socket, or an in-memory sink for tests.

A transport belongs to the sender's worker thread: ZeroMQ sockets are not thread-safe, so it is
created, used and closed there only.
"""

from __future__ import annotations

import logging
import os
from typing import Final, Protocol

import msgspec
import zmq
import zmq.auth

from invoseq import wire
from tracer._core import accel
from tracer._shipping.handshakes import Handshakes

log = logging.getLogger("tracer")

_ack_decoder = msgspec.msgpack.Decoder(wire.Ack)


class Transport(Protocol):
    def send(self, body: bytes | bytearray) -> bool:
        """Queue one encoded batch without blocking; False when the queue is full."""

    def receive_acks(self, timeout_ms: int) -> list[wire.Ack]:
        """Acknowledgements received so far, waiting up to ``timeout_ms`` for the first one."""

    def close(self) -> None: ...


class KeyFileError(ValueError):
    """A CURVE key file the tracer cannot use: a one-line message naming the file and setting."""


def load_curve(curve: tuple[str, str]) -> tuple[bytes, bytes, bytes]:
    """(server public key file, client secret key file) -> the three keys a DEALER needs.
    Raises KeyFileError."""
    server_public, _ = _read_key_file(curve[0], "curve_server_key")
    client_public, client_secret = _read_key_file(curve[1], "curve_client_key")
    if client_secret is None:
        raise KeyFileError(
            f"the CURVE key file {curve[1]} (curve_client_key) holds no secret key: give this "
            "client's NAME.key_secret file, not its public NAME.key"
        )
    return server_public, client_public, client_secret


def _read_key_file(path: str, setting: str) -> tuple[bytes, bytes | None]:
    what = f"the CURVE key file {path} ({setting})"
    try:
        public, secret = zmq.auth.load_certificate(path)
    except ValueError:  # no public-key line
        raise KeyFileError(f"{what} is not a key file (made by `cmr keys generate`)") from None
    except OSError as exc:  # pyzmq raises a bare OSError for a missing file
        reason = exc.strerror or ("no such file" if not os.path.exists(path) else str(exc))
        raise KeyFileError(f"cannot read {what}: {reason}") from None
    for key in (public, secret):
        if key is not None and not _is_key(key):
            raise KeyFileError(f"{what} holds a malformed key")
    return public, secret


def _is_key(key: bytes) -> bool:
    """A Z85-encoded 32-byte key, as ZeroMQ takes it."""
    return len(key) == 40 and all(chr(c) in _Z85 for c in key)


_Z85: Final = frozenset(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)


class ZmqTransport:
    """DEALER connected to the repository's ROUTER. Sends never block: IMMEDIATE makes a send fail
    at once while no connection is up (the batch then waits in the sender's own queue and spool,
    which it accounts for, rather than in ZeroMQ's), and SNDHWM caps ZeroMQ's buffer at the
    in-flight window. LINGER is 0 because the sender decides how long to wait for
    acknowledgements, so closing never hangs the host program."""

    def __init__(
        self,
        endpoint: str,
        window: int,
        curve: tuple[str, str] | None = None,
        context: SharedContext | None = None,
    ) -> None:
        keys = load_curve(curve) if curve is not None else None  # before a socket exists
        self._shared = context or SharedContext()
        self._socket = self._shared.acquire().socket(zmq.DEALER)
        if keys is not None:
            server_public, client_public, client_secret = keys
            self._socket.curve_serverkey = server_public
            self._socket.curve_publickey = client_public
            self._socket.curve_secretkey = client_secret
        self._socket.setsockopt(zmq.IMMEDIATE, 1)
        self._socket.setsockopt(zmq.SNDHWM, window)
        self._socket.setsockopt(zmq.RCVHWM, 0)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, 1024)
        #: What a refusing repository says: its monitor, read with the acknowledgements.
        self.handshakes: Handshakes | None = None
        try:
            self.handshakes = Handshakes(self._socket, endpoint, curve)
        except zmq.ZMQError:  # no monitor: refusals go unsaid, batches are unaffected
            log.debug("invoseq: cannot monitor the handshakes with %s", endpoint)
        try:
            self._socket.connect(endpoint)
        except zmq.ZMQError:
            self.close()
            raise
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)
        speedups = accel.speedups
        #: The C accelerator's send without a copy (``_speedups_send.h``), where libzmq allows.
        self._send_body = (
            speedups.send_body if speedups is not None and speedups.zero_copy_available() else None
        )
        self._address: int = self._socket.underlying

    def send(self, body: bytes | bytearray) -> bool:
        if self._send_body is not None:
            error = self._send_body(self._address, wire.BATCH_HEADER, body)
            if error is None:
                return True
            if error == zmq.EAGAIN:
                return False
            raise zmq.ZMQError(error)
        try:
            # Copied: pyzmq sends a large message (64 KiB and more) without copying through a
            # garbage-collector thread of its own, which it stops at exit, before the tracer's
            # last flush: that flush's large batch raised ("zmq gc socket requested during
            # shutdown") and was lost, with the samples of a program sampled every millisecond.
            self._socket.send_multipart((wire.BATCH_HEADER, body), flags=zmq.NOBLOCK, copy=True)
        except zmq.Again:
            return False
        return True

    def receive_acks(self, timeout_ms: int) -> list[wire.Ack]:
        acks: list[wire.Ack] = []
        if not self._poller.poll(timeout_ms):
            return acks
        while True:
            try:
                frames = self._socket.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return acks
            if len(frames) == 2 and frames[0] == wire.ACK_HEADER:
                try:
                    acks.append(_ack_decoder.decode(frames[1]))
                except msgspec.DecodeError:
                    log.debug("invoseq: ignoring a malformed acknowledgement")

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """The DEALER, for polling several transports at once (``tracer._shipping.endpoints``)."""
        return self._socket

    def close(self) -> None:
        if self.handshakes is not None:
            self.handshakes.check()  # a refusal that came in the last moments is still said
            self.handshakes.close()
            self.handshakes = None
        self._socket.close(linger=0)
        self._shared.release()
        if self._send_body is not None and accel.speedups is not None:
            accel.speedups.reap_sent()  # what the closed socket held, once its context ended


class SharedContext:
    """One ZeroMQ context (one I/O thread) for the sockets of every repository node a sender
    talks to; terminated when the last of them is closed."""

    def __init__(self) -> None:
        self._context: zmq.Context[zmq.Socket[bytes]] | None = None
        self._users = 0

    def acquire(self) -> zmq.Context[zmq.Socket[bytes]]:
        if self._context is None:
            self._context = zmq.Context(io_threads=1)
        self._users += 1
        return self._context

    def release(self) -> None:
        self._users -= 1
        if self._users == 0 and self._context is not None:
            self._context.term()
            self._context = None


def open_zmq(
    endpoints: tuple[str, ...], window: int, curve: tuple[str, str] | None
) -> list[Transport]:
    """One DEALER per repository node, sharing one context; the same CURVE keys for all."""
    context = SharedContext()
    transports: list[Transport] = []
    try:
        for endpoint in endpoints:
            transports.append(ZmqTransport(endpoint, window, curve, context))
    except BaseException:
        for transport in transports:
            transport.close()
        raise
    return transports


class MemoryTransport:
    """Decodes every batch into a list and acknowledges it at once (``tracer.testing``)."""

    def __init__(self) -> None:
        self.batches: list[wire.Batch] = []
        self._decoder = msgspec.msgpack.Decoder(wire.Batch)
        self._pending: list[wire.Ack] = []

    def send(self, body: bytes | bytearray) -> bool:
        batch = self._decoder.decode(body)
        self.batches.append(batch)
        self._pending.append(wire.Ack(batch.puid, batch.batch_no))
        return True

    def receive_acks(self, timeout_ms: int) -> list[wire.Ack]:
        acks, self._pending = self._pending, []
        return acks

    def close(self) -> None:
        pass

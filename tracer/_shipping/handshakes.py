"""Refusals said: what a repository that will not take this process's batches tells it, logged.

More in docs/architecture.md, "tracer/_shipping/handshakes.py".
"""

from __future__ import annotations

import contextlib
import logging
from typing import Final

import zmq

from invoseq.monitor import monitor_event

log = logging.getLogger("tracer")

#: The monitor's events: the handshakes that failed, and the one that succeeded.
EVENTS: Final = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
#: Hang-ups in a row during the handshake that make a refusal (ZeroMQ retries every 100 ms).
HANGUPS: Final = 3

_STORED_NOTHING: Final = "nothing this process sends there is stored"


class Handshakes:
    """The handshake events of one DEALER (its endpoint, its CURVE key files or None)."""

    def __init__(
        self, sock: zmq.Socket[bytes], endpoint: str, curve: tuple[str, str] | None
    ) -> None:
        self._socket: zmq.Socket[bytes] | None = sock
        self._monitor: zmq.Socket[bytes] | None = sock.get_monitor_socket(EVENTS)
        self._endpoint = endpoint
        self._curve = curve
        self._hangups = 0
        self._refused = False  # a refusal was said, and no handshake succeeded since
        self.said: list[str] = []  # the causes logged, in order

    def check(self) -> None:
        """Read the events so far, never waiting, and log a refusal whose cause is new."""
        while self._monitor is not None:
            try:
                frames = self._monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError:  # the context is going away: nothing more to learn
                self.close()
                return
            event = monitor_event(frames)
            if event is not None:
                self._seen(*event)

    def _seen(self, event: int, value: int) -> None:
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._hangups = 0
            self._refused = False
        elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self._say("auth", self._refused_key())
        elif event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            self._say("protocol", self._protocol(value))
        elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self._hangups += 1
            if self._hangups >= HANGUPS:
                self._say("hangup", self._hangup())

    def _say(self, cause: str, message: str) -> None:
        if self._refused or cause in self.said:
            return
        self._refused = True
        self.said.append(cause)
        log.warning("invoseq: %s; %s", message, _STORED_NOTHING)

    def _refused_key(self) -> str:
        client = f" ({self._curve[1]})" if self._curve is not None else ""
        return (
            f"the repository at {self._endpoint} refused this process's CURVE key{client}: its "
            "public key is not in the repository's --allowed-clients directory (unknown, or "
            "revoked; the repository reads the directory when it starts)"
        )

    def _protocol(self, value: int) -> str:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            if self._curve is None:
                return (
                    f"the repository at {self._endpoint} requires CURVE and this process has no "
                    "keys: set curve_server_key and curve_client_key (INVOSEQ_CURVE_SERVER_KEY, "
                    "INVOSEQ_CURVE_CLIENT_KEY; `cmr keys generate`)"
                )
            return (
                f"the repository at {self._endpoint} does not use CURVE, and this process does "
                "(curve_server_key is set): start it with --curve-secret and --allowed-clients, "
                "or unset the keys"
            )
        if self._curve is not None:
            return (
                f"the CURVE handshake with the repository at {self._endpoint} failed (ZeroMQ "
                f"protocol error {value:#x}): likely curve_server_key ({self._curve[0]}) is not "
                "the public key of the repository's --curve-secret"
            )
        return (
            f"the handshake with the repository at {self._endpoint} failed (ZeroMQ protocol "
            f"error {value:#x}): likely no invoseq repository listens there"
        )

    def _hangup(self) -> str:
        if self._curve is not None:
            return (
                f"the repository at {self._endpoint} hangs up during every CURVE handshake: "
                f"likely curve_server_key ({self._curve[0]}) is not the public key of the "
                "repository's --curve-secret, or the repository does not use CURVE"
            )
        return (
            f"the repository at {self._endpoint} hangs up during every handshake: likely it "
            "requires CURVE keys (curve_server_key, curve_client_key) this process does not have"
        )

    def close(self) -> None:
        """Stop monitoring; call while the socket is still open."""
        if self._socket is not None:
            with contextlib.suppress(zmq.ZMQError):  # the context is already going away
                self._socket.disable_monitor()
            self._socket = None
        if self._monitor is not None:
            self._monitor.close(linger=0)
            self._monitor = None

"""A minimal Debug Adapter Protocol client, enough to drive debugpy from a test: requests and
their responses, events, over one socket, every read bounded in time."""

from __future__ import annotations

import json
import socket
import time
from typing import Any


class DapClient:
    def __init__(self, port: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.buffer = b""
        self.seq = 0
        self.events: list[dict[str, Any]] = []  # received and not yet waited for
        self.responses: dict[int, dict[str, Any]] = {}

    def close(self) -> None:
        self.sock.close()

    def send(self, command: str, **arguments: Any) -> int:
        self.seq += 1
        body = json.dumps(
            {"seq": self.seq, "type": "request", "command": command, "arguments": arguments}
        ).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def request(self, command: str, **arguments: Any) -> dict[str, Any]:
        """Send a request and wait for its response; a failed one fails the test."""
        response = self.response(self.send(command, **arguments))
        assert response["success"], response
        return response

    def response(self, seq: int) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while seq not in self.responses:
            self._read(deadline)
        return self.responses.pop(seq)

    def event(self, name: str) -> dict[str, Any]:
        """The first event ``name`` not yet waited for (earlier ones of other names are kept)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            for n, event in enumerate(self.events):
                if event["event"] == name:
                    del self.events[n]
                    return event
            self._read(deadline)

    def _read(self, deadline: float) -> None:
        while b"\r\n\r\n" not in self.buffer:
            self._receive(deadline)
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = int(dict(line.split(b": ", 1) for line in head.split(b"\r\n"))[b"Content-Length"])
        while len(rest) < length:
            self.buffer = head + b"\r\n\r\n" + rest
            self._receive(deadline)
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
        message = json.loads(rest[:length])
        self.buffer = rest[length:]
        if message["type"] == "response":
            self.responses[message["request_seq"]] = message
        elif message["type"] == "event":
            self.events.append(message)

    def _receive(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no DAP message within {self.timeout_s} s; events: {self.events}")
        self.sock.settimeout(left)
        chunk = self.sock.recv(65536)
        if not chunk:
            raise AssertionError(f"the debug adapter closed the connection; events: {self.events}")
        self.buffer += chunk

"""The load generator of case ``requests``: GETs over a few connections, each with one request in
flight, so that the server always has the next one waiting (a closed connection is opened again:
gunicorn's sync worker closes each after its response). Every wait is bounded.
"""

from __future__ import annotations

import selectors
import socket
import time
from contextlib import ExitStack
from typing import Final

#: Connections kept busy at once.
CONNECTIONS: Final = 4


class _Connection:
    """One client connection: sends a request, reads its response, again."""

    __slots__ = ("buffer", "closing", "sock")

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.buffer = b""
        self.closing = False

    def response(self) -> bool | None:
        """True: a whole 200 response is in; None: not yet (raises on another status)."""
        head, found, body = self.buffer.partition(b"\r\n\r\n")
        if not found:
            return None
        lines = head.split(b"\r\n")
        if lines[0].split()[1] != b"200":
            raise OSError(f"status {lines[0]!r}")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                self.closing = True
        if len(body) < length:
            return None
        self.buffer = body[length:]
        return True


def load(port: int, path: str, requests: int, connections: int = CONNECTIONS) -> float:
    """Send ``requests`` GETs of ``path`` over ``connections`` connections, each with one
    request in flight (a closed connection is opened again); the seconds it took."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    deadline = time.monotonic() + 120
    started = time.perf_counter()
    sent = done = 0
    with ExitStack() as stack, selectors.DefaultSelector() as selector:

        def send(conn: _Connection) -> None:
            nonlocal sent
            conn.sock.sendall(request)
            sent += 1

        for _ in range(min(connections, requests)):
            conn = _Connection(port)
            stack.callback(lambda c=conn: c.sock.close())
            selector.register(conn.sock, selectors.EVENT_READ, conn)
            send(conn)
        while done < requests:
            if time.monotonic() > deadline:
                raise OSError("the load did not finish in time")
            for key, _ in selector.select(5):
                conn = key.data
                chunk = conn.sock.recv(65536)
                if not chunk and not conn.buffer:
                    raise OSError("the server closed a connection before answering")
                conn.buffer += chunk
                if conn.response() is None:
                    continue
                done += 1
                if conn.closing or not chunk:
                    selector.unregister(conn.sock)
                    conn.sock.close()
                    if sent >= requests:
                        continue
                    conn = _Connection(port)
                    stack.callback(lambda c=conn: c.sock.close())
                    selector.register(conn.sock, selectors.EVENT_READ, conn)
                if sent < requests:
                    send(conn)
    return time.perf_counter() - started

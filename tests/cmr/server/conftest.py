"""What the server tests share: a memory store served over TCP with a small frame limit,
DEALER sockets like a traced process's and the acknowledgements they get back, and `cmr serve`
run as a process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import msgspec
import pytest
import zmq

from cmr.server.server import ServerThread
from cmr.store import Store
from cmr.store.memory.store import MemoryStore
from invoseq import wire

BatchFactory = Callable[..., wire.Batch]
Encode = Callable[[wire.Batch], list[bytes]]

MAX_FRAME = 4096
TIMEOUT_MS = 10_000
SEQ = bytes.fromhex("5e9" + "0" * 29)


def events() -> dict[int, list[wire.Event]]:
    return {1: [wire.Start(1, 0, 0, 1, 100, SEQ), wire.End(1, 200)]}


def receive_ack(sock: zmq.Socket[bytes]) -> wire.Ack:
    assert sock.poll(TIMEOUT_MS), "no reply from the server"
    header, body = sock.recv_multipart()
    assert header == wire.ACK_HEADER
    return msgspec.msgpack.decode(body, type=wire.Ack)


def request(sock: zmq.Socket[bytes], frames: list[bytes]) -> wire.Ack:
    sock.send_multipart(frames)
    return receive_ack(sock)


@pytest.fixture(name="store")
def fixture_store() -> Iterator[Store]:
    store = MemoryStore()
    yield store
    store.close()


@pytest.fixture(name="server")
def fixture_server(store: Store) -> Iterator[ServerThread]:
    with ServerThread(store, "tcp://127.0.0.1:*", max_frame_bytes=MAX_FRAME) as server:
        yield server


@pytest.fixture(name="connect")
def fixture_connect() -> Iterator[Callable[[str], zmq.Socket[bytes]]]:
    """``connect(endpoint)``: a DEALER like a traced process's, closed after the test."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sockets: list[zmq.Socket[bytes]] = []

    def connect(endpoint: str) -> zmq.Socket[bytes]:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        sockets.append(sock)
        return sock

    yield connect
    for sock in sockets:
        sock.close()
    context.term()


@pytest.fixture(name="client")
def fixture_client(
    server: ServerThread, connect: Callable[[str], zmq.Socket[bytes]]
) -> zmq.Socket[bytes]:
    return connect(server.endpoint)


def start_server_process(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cmr.server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Wait for the process; its exit code, the rest of stdout, and stderr."""
    try:
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    return process.returncode, out, err

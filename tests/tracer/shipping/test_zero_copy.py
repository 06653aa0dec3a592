"""Bodies handed to ZeroMQ without a copy (tracer/_core/_speedups_send.h): they arrive as they
were encoded, are never written over while ZeroMQ still holds them, and are let go once it is
done with them."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from invoseq import wire
from tests.tracer.core.implementations import _speedups, needs_c_path
from tracer._shipping import bodies as bodies_module
from tracer._shipping.bodies import Bodies
from tracer._shipping.transport import ZmqTransport

pytestmark = [needs_c_path, pytest.mark.system]

WAIT_S = 30.0
#: What a Unix socket's kernel buffers hold at most here, about: the sender's send buffer (its
#: default size; a sent chunk is charged to it until the peer reads it). A body eight times as
#: large stays ZeroMQ's while the peer is frozen, whatever the machine's setting.
WMEM_DEFAULT = Path("/proc/sys/net/core/wmem_default")
SOCKET_BUFFER = int(WMEM_DEFAULT.read_text()) if WMEM_DEFAULT.exists() else 212_992
BIG = max(3_000_000, 8 * SOCKET_BUFFER)

#: A repository that prints each message's frames after the DEALER's identity: the first as hex,
#: the second's SHA-256. Frozen (SIGSTOP), it reads
#: nothing: a body larger than the socket's kernel buffers then stays ZeroMQ's.
PEER = """
import hashlib, sys, zmq
socket = zmq.Context().socket(zmq.ROUTER)
socket.bind(sys.argv[1])
print("ready", flush=True)
while True:
    _, *frames = socket.recv_multipart()
    print(frames[0].hex(), *(hashlib.sha256(frame).hexdigest() for frame in frames[1:]), flush=True)
"""


def leases_let_go() -> bool:
    """Wait (bounded) until libzmq has run the free function of every body it was given."""
    deadline = time.monotonic() + WAIT_S
    while True:
        _speedups.reap_sent()
        if _speedups.leased_bodies() == 0:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)  # libzmq's I/O thread sets a flag: there is nothing to wait on


class Peer:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.process = subprocess.Popen(
            [sys.executable, "-c", PEER, endpoint], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        self.output = self.process.stdout
        assert self.output.readline().strip() == "ready"

    def freeze(self) -> None:
        """Stop it (SIGSTOP) and wait (bounded) until each of its threads is stopped: the signal
        is delivered to each thread on its own, and one still running reads what is sent."""
        os.kill(self.process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + WAIT_S
        while not self.stopped():
            assert time.monotonic() < deadline, "the peer never stopped"
            time.sleep(0.001)  # the kernel stops each thread: there is nothing to wait on

    def stopped(self) -> bool:
        tasks = Path(f"/proc/{self.process.pid}/task")
        return all(
            (task / "stat").read_text().rpartition(")")[2].split()[0] == "T"
            for task in tasks.iterdir()
        )

    def thaw(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def received(self) -> str:
        return self.output.readline().strip()  # bounded: the test's timeout kills the peer

    def stop(self) -> None:
        self.thaw()
        self.process.kill()
        self.process.wait(WAIT_S)
        self.output.close()


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    running = Peer(f"ipc://{tmp_path}/repository.sock")
    try:
        yield running
    finally:
        running.stop()


def as_sent(body: bytes | bytearray) -> str:
    """What the peer prints of a batch: its header frame, then its body's SHA-256."""
    return f"{wire.BATCH_HEADER.hex()} {hashlib.sha256(body).hexdigest()}"


def send_once_connected(transport: ZmqTransport, body: bytearray) -> None:
    """Send ``body``: IMMEDIATE refuses it until the connection is up (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while not transport.send(body):
        assert time.monotonic() < deadline, "the connection never came up"
        time.sleep(0.01)  # the connection comes up on ZeroMQ's I/O thread: nothing to wait on


def connected(peer: Peer) -> ZmqTransport:
    """A transport whose connection to ``peer`` is up (a small body sent and received)."""
    transport = ZmqTransport(peer.endpoint, window=8)
    assert transport._send_body is not None, "libzmq's functions were not found"
    send_once_connected(transport, bytearray(b"\x90"))
    assert peer.received() == as_sent(b"\x90")
    return transport


def test_a_body_sent_without_a_copy_arrives_as_encoded_and_is_let_go(peer: Peer) -> None:
    transport = connected(peer)
    try:
        body = bytearray(msgspec.msgpack.encode(list(range(100_000))))
        alone = sys.getrefcount(body)
        assert transport.send(body)
        assert peer.received() == as_sent(body)
        assert leases_let_go()
        assert sys.getrefcount(body) == alone
    finally:
        transport.close()


def test_a_body_zeromq_still_holds_is_never_written_over(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = connected(peer)
    monkeypatch.setattr(bodies_module, "KEEP_ONE_BYTES", 2 * BIG)  # the pool keeps the body
    bodies = Bodies(msgspec.msgpack.Encoder().encode_into, keep_bytes=4 * BIG)
    try:
        peer.freeze()
        big = [b"x" * 1024] * (BIG // 1024)  # far more than the socket's kernel buffers hold
        first = bodies.encode(big)
        expected = as_sent(first)
        assert transport.send(first)
        _speedups.reap_sent()
        assert _speedups.leased_bodies() == 1, "the frozen peer's socket took the whole body"
        first_id = id(first)
        del first
        second = bodies.encode([2, "two"])
        assert id(second) != first_id  # the first is ZeroMQ's until the peer has read it
        assert _speedups.leased_bodies() == 1
        peer.thaw()
        assert peer.received() == expected
        assert msgspec.msgpack.decode(second) == [2, "two"]
        assert leases_let_go()
    finally:
        transport.close()


def test_a_refused_body_is_let_go_at_once(tmp_path: Path) -> None:
    transport = ZmqTransport(f"ipc://{tmp_path}/nobody.sock", window=8)  # no connection
    try:
        body = bytearray(b"\x91\x01")
        alone = sys.getrefcount(body)
        assert transport.send(body) is False
        assert _speedups.leased_bodies() == 0
        assert sys.getrefcount(body) == alone
    finally:
        transport.close()


def test_closing_the_transport_lets_go_of_what_zeromq_held(peer: Peer) -> None:
    transport = connected(peer)
    peer.freeze()
    body = bytearray(b"y" * max(8_000_000, BIG))  # the frozen peer reads none of it
    alone = sys.getrefcount(body)
    assert transport.send(body)
    _speedups.reap_sent()
    assert _speedups.leased_bodies() == 1
    transport.close()  # LINGER 0: the message is dropped and its context ended
    assert _speedups.leased_bodies() == 0
    assert sys.getrefcount(body) == alone


def test_a_forked_child_lets_go_of_the_bodies_its_parents_zeromq_held(peer: Peer) -> None:
    transport = connected(peer)
    try:
        peer.freeze()
        body = bytearray(b"z" * max(8_000_000, BIG))  # the frozen peer reads none of it
        assert transport.send(body)
        _speedups.reap_sent()
        assert _speedups.leased_bodies() == 1
        child = os.fork()
        if child == 0:  # no I/O thread here holds the parent's message
            os._exit(0 if _speedups.leased_bodies() == 0 else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _speedups.leased_bodies() == 1  # the parent's is still ZeroMQ's
    finally:
        transport.close()

"""Bodies handed to ZeroMQ without a copy (tracer/_core/_speedups_send.h): they arrive as they
were encoded, are never written over while ZeroMQ still holds them, and are let go once it is
done with them."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq

from invoseq import wire
from tests.tracer.core.implementations import _speedups, needs_c_path
from tracer._shipping.bodies import Bodies
from tracer._shipping.transport import ZmqTransport

pytestmark = needs_c_path

WAIT_S = 30.0


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


@pytest.fixture
def router(tmp_path: Path) -> Iterator[tuple[zmq.Socket[bytes], str]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    socket = context.socket(zmq.ROUTER)
    socket.linger = 0
    endpoint = f"ipc://{tmp_path}/repository.sock"
    socket.bind(endpoint)
    try:
        yield socket, endpoint
    finally:
        socket.close()
        context.term()


def received(socket: zmq.Socket[bytes]) -> list[bytes]:
    assert socket.poll(int(WAIT_S * 1000)), "nothing arrived"
    return socket.recv_multipart()[1:]  # without the DEALER's identity


def send_once_connected(
    transport: ZmqTransport, body: bytearray, socket: zmq.Socket[bytes]
) -> None:
    """Send ``body``: IMMEDIATE refuses it until the connection is up (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while not transport.send(body):
        assert time.monotonic() < deadline, "the connection never came up"
        socket.poll(10)


def connected(endpoint: str) -> ZmqTransport:
    transport = ZmqTransport(endpoint, window=8)
    assert transport._send_body is not None, "libzmq's functions were not found"
    return transport


def test_a_body_sent_without_a_copy_arrives_as_encoded_and_is_let_go(
    router: tuple[zmq.Socket[bytes], str],
) -> None:
    socket, endpoint = router
    transport = connected(endpoint)
    try:
        body = bytearray(msgspec.msgpack.encode(list(range(100_000))))
        expected = bytes(body)
        alone = sys.getrefcount(body)
        send_once_connected(transport, body, socket)
        assert received(socket) == [wire.BATCH_HEADER, expected]
        assert leases_let_go()
        assert sys.getrefcount(body) == alone
    finally:
        transport.close()


def test_a_body_zeromq_still_holds_is_never_written_over(
    router: tuple[zmq.Socket[bytes], str],
) -> None:
    socket, endpoint = router
    transport = connected(endpoint)
    bodies = Bodies(msgspec.msgpack.Encoder().encode_into)
    try:
        # Far more than the socket's kernel buffers: ZeroMQ holds it until the router reads.
        big = [b"x" * 1024] * 3_000
        first = bodies.encode(big)
        send_once_connected(transport, first, socket)
        first_id = id(first)
        del first
        second = bodies.encode([2, "two"])
        assert id(second) != first_id  # the first is ZeroMQ's until it is sent
        assert msgspec.msgpack.decode(received(socket)[1]) == big
        assert msgspec.msgpack.decode(second) == [2, "two"]
        assert leases_let_go()
    finally:
        transport.close()


def test_a_refused_body_is_let_go_at_once(tmp_path: Path) -> None:
    transport = connected(f"ipc://{tmp_path}/nobody.sock")  # nothing listens: no connection
    try:
        body = bytearray(b"\x91\x01")
        alone = sys.getrefcount(body)
        assert transport.send(body) is False
        assert _speedups.leased_bodies() == 0
        assert sys.getrefcount(body) == alone
    finally:
        transport.close()


def test_closing_the_transport_lets_go_of_what_zeromq_held(
    router: tuple[zmq.Socket[bytes], str],
) -> None:
    socket, endpoint = router
    transport = connected(endpoint)
    body = bytearray(b"y" * 8_000_000)  # the router never reads it
    alone = sys.getrefcount(body)
    send_once_connected(transport, body, socket)
    transport.close()  # LINGER 0: the message is dropped and its context ended
    assert _speedups.leased_bodies() == 0
    assert sys.getrefcount(body) == alone

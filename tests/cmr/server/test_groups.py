"""Group commit's receiving side: the messages already waiting, never more than a group, and
never a wait for one that has not come."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from cmr.server.groups import GROUP_BATCHES, GROUP_BYTES, filled, take_waiting


@pytest.fixture(name="pair")
def fixture_pair() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    context = zmq.Context()
    receiver = context.socket(zmq.ROUTER)
    sender = context.socket(zmq.DEALER)
    receiver.bind("inproc://groups")
    sender.connect("inproc://groups")
    yield sender, receiver
    sender.close(linger=0)
    receiver.close(linger=0)
    context.term()


def test_the_waiting_messages_are_taken_a_group_at_a_time(
    pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]],
) -> None:
    sender, receiver = pair
    for n in range(GROUP_BATCHES + 2):
        sender.send_multipart([b"header", str(n).encode()])
    assert receiver.poll(10_000), "nothing arrived"

    first = take_waiting(receiver)
    rest = take_waiting(receiver)

    bodies = [message[-1] for message in first + rest]
    assert bodies == [str(n).encode() for n in range(GROUP_BATCHES + 2)]  # in order, each once
    assert len(first) == GROUP_BATCHES
    assert all(len(message) == 3 for message in first)  # the sender's identity kept in front
    assert take_waiting(receiver) == []  # nothing waiting: returns at once


def test_big_batches_make_smaller_groups(pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]]) -> None:
    # A busy process's batches (up to 32,768 events, about a megabyte each): a group stops at
    # the one that crosses GROUP_BYTES, so a commit of a slow store stays short.
    sender, receiver = pair
    big = GROUP_BYTES * 3 // 4
    for n in range(3):
        sender.send_multipart([b"header", bytes([n]) * big])
    assert receiver.poll(10_000), "nothing arrived"

    first = take_waiting(receiver)
    assert filled(first)
    rest = take_waiting(receiver)

    assert [message[-1][:1] for message in first] == [b"\x00", b"\x01"]
    assert [message[-1][:1] for message in rest] == [b"\x02"]
    assert not filled(rest)

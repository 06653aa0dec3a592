"""Group commit: the batches waiting on a socket, taken together.

A batch's transaction costs about as much to commit as to write (SQLite writes every page it
touched to the WAL; PostgreSQL flushes its WAL to disk). When batches arrive faster than they are
stored they queue on the socket, and ``Ingest.handle_many`` stores those waiting in one
transaction, acknowledging each after the commit: the sender's guarantee is unchanged, and a
quiet repository still commits every batch as it comes (a group of one).
"""

from __future__ import annotations

from typing import Final

import zmq

#: At most this many batches a transaction: enough to share the commit (measured while building
#: it, 8 took SQLite's ingest of the benchmark's traffic from 875-1,210 to 575-650 ns an event,
#: and 16 or 32 gained nothing more), few enough that the first batch's acknowledgement waits
#: for little (a batch of 4,096 events is stored in a few milliseconds).
GROUP_BATCHES: Final = 8

#: And at most about this many bytes of batches: a busy process sends batches of up to 32,768
#: events (about 1 MB), eight of which would hold a PostgreSQL commit for seconds, near the
#: sender's resend interval. The batch that crosses it is the group's last.
GROUP_BYTES: Final = 2 * 1024 * 1024


def take_waiting(sock: zmq.Socket[bytes], limit: int = GROUP_BATCHES) -> list[list[bytes]]:
    """Up to ``limit`` messages already waiting on ``sock`` (fewer once they hold GROUP_BYTES),
    without waiting for more."""
    messages: list[list[bytes]] = []
    size = 0
    while len(messages) < limit and size < GROUP_BYTES:
        try:
            message = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            break
        messages.append(message)
        size += sum(len(frame) for frame in message)
    return messages


def filled(group: list[list[bytes]], limit: int = GROUP_BATCHES) -> bool:
    """Whether ``take_waiting`` stopped at a bound rather than at an empty socket."""
    return len(group) >= limit or sum(len(f) for m in group for f in m) >= GROUP_BYTES

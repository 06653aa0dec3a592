"""ZeroMQ socket-monitor events, as the tracer (its handshakes) and the repository (CURVE
refusals) read them.

A monitor message is two frames: the event's id (16 bits) and value (32 bits), native byte order,
no padding, then the endpoint (``zmq_socket_monitor``). Read here rather than with pyzmq's
``zmq.utils.monitor``, which imports ``zmq.asyncio`` and with it ``asyncio`` (14-22 ms) into every
traced process that sends and into ``cmr serve``.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final

_EVENT: Final = struct.Struct("=hi")


def monitor_event(frames: list[bytes]) -> tuple[int, int] | None:
    """A monitor message's (event, value); None when the frames are not one."""
    if len(frames) != 2 or len(frames[0]) != _EVENT.size:
        return None
    event, value = _EVENT.unpack(frames[0])
    return event, value

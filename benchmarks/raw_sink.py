"""The baseline of case 2: a bare ROUTER that decodes batches and stores nothing.

``python -m benchmarks.raw_sink ENDPOINT EVENTS``: binds, prints ``ready``, decodes batches
with the repository's typed decoder until EVENTS events arrived, answers ``done`` to the last
sender and exits. It is what ZeroMQ and msgspec alone can carry (DESIGN.md's anchor: batches of
256, 3.5 M events/s decoded), measured in the same run as the tracer's own path.
"""

from __future__ import annotations

import sys
from typing import Final

import msgspec
import zmq

from invoseq import wire

#: The longest the sink waits for the next message before giving up.
IDLE_MS: Final = 60_000


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m benchmarks.raw_sink ENDPOINT EVENTS", file=sys.stderr)
        return 1
    endpoint, expected = argv[0], int(argv[1])
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.bind(endpoint)
    print("ready", flush=True)
    decoder = msgspec.msgpack.Decoder(wire.Batch)
    received = 0
    try:
        while received < expected:
            if not sock.poll(IDLE_MS, zmq.POLLIN):
                print(f"raw_sink: idle for {IDLE_MS} ms at {received} events", file=sys.stderr)
                return 1
            identity, _, body = sock.recv_multipart()
            received += wire.event_count(decoder.decode(body))
        sock.send_multipart([identity, b"done"])
    finally:
        sock.close()
        context.term()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

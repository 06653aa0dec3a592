"""``tracer.testing.capture``: what a test reads of a capture once its block has ended is what the
block captured, whatever other threads still do with the tracer (a server's thread finishing a
request whose response the test already has)."""

from __future__ import annotations

import threading

import tracer
from tracer.testing import capture


@tracer.traced
def _serve(started: threading.Event, release: threading.Event) -> None:
    started.set()
    release.wait(10)


def test_a_capture_is_read_after_its_block_while_a_call_begun_in_it_ends_later() -> None:
    started, release = threading.Event(), threading.Event()
    server = threading.Thread(target=_serve, args=(started, release))
    with capture() as trace:
        server.start()
        assert started.wait(10)
    release.set()  # the call ends, and records its End, after the tracer was shut down
    server.join(10)
    assert not server.is_alive()

    [served] = trace.invocations()
    assert served.name.endswith("_serve")
    assert served.status == "running"  # its End came after the capture ended

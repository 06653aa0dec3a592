"""``tracer.testing.capture``: what a test reads of a capture once its block has ended is what the
block captured, whatever other threads still do with the tracer (a server's thread finishing a
request whose response the test already has), and nothing another process left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

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


SPOOLS = """
import tracer
tracer.configure(endpoint="tcp://127.0.0.1:9", flush_timeout_ms=100, sample_interval_ms=0)
@tracer.traced
def left_behind() -> int:
    return 1
left_behind()
tracer.shutdown()
assert tracer.stats().spooled_events == 2
"""

CAPTURES = """
import tracer
from tracer.testing import capture
@tracer.traced
def captured() -> int:
    return 1
with capture(sample_interval_ms=0) as trace:
    captured()
print([i.name for i in trace.invocations()])
"""


def test_a_capture_replays_no_spool_another_process_of_the_program_left(tmp_path: Path) -> None:
    """Both are the program ``-c`` (as pytest-xdist's workers are): the first, its repository
    unreachable, leaves its events in a spool file and exits; the second's capture shows only its
    own call, and leaves the file to a process that sends to a repository."""
    env = {**os.environ, "INVOSEQ_SPOOL_DIR": str(tmp_path)}
    for script in (SPOOLS, CAPTURES):
        done = subprocess.run(
            [sys.executable, "-c", script],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "['__main__.captured']"
    assert len(list(tmp_path.glob("*.spool"))) == 1

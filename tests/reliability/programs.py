"""The traced program the outage and spool tests run, and what they read back from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.reliability.harness import Program
from tests.support import write_script
from tracer._shipping import spool

#: Every sequence is ``outage.request`` calling ``outage.step`` four times: ten events.
#: ``python outage.py MODE SEQUENCES``, where MODE is
#:
#: - ``exit``: emit, print ``emitted``, exit;
#: - ``wait-spooled`` / ``wait-dropped``: emit, wait until the sender has taken every event and
#:   spooled (or dropped) some batches, print ``waiting``; on a line from stdin, flush and print
#:   ``done``;
#: - ``session``: open ``outage.session`` (the root of a sequence), flush and print ``opened``;
#:   on a line from stdin, run a filler sequence on another thread and wait until the sender has
#:   taken it, close the session, emit, wait for drops and go on as ``wait-dropped``.
#:
#: Every mode prints ``exited`` with its ``tracer.stats()`` after the tracer's own shutdown at
#: exit. The waits poll the sender's counters, bounded in time.
OUTAGE = """
import atexit, dataclasses, json, os, sys, threading, time

MODE, SEQUENCES = sys.argv[1], int(sys.argv[2])

def report(word, **extra):
    import tracer
    stats = dataclasses.asdict(tracer.stats())
    print(word, json.dumps({"pid": os.getpid(), **stats, **extra}), flush=True)

# atexit runs its handlers last registered first: this one after the tracer's own shutdown.
atexit.register(report, "exited")
import tracer

@tracer.traced(name="outage.request")
def request(n):
    for k in range(4):
        step(n, k)

@tracer.traced(name="outage.step")
def step(n, k):
    return n * k

def wait_until(condition):
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for the sender: {tracer.stats()}")
        time.sleep(0.01)

def taken():
    return tracer.stats().buffered_events == 0

@tracer.traced(name="outage.session")
def session():
    step(0, 0)
    report("opened", acknowledged=tracer.flush(timeout_s=60))
    sys.stdin.readline()  # meanwhile the repository goes away
    # Another sequence goes first and takes the window (or waits, unsendable): what follows
    # waits in the memory queue.
    filler = threading.Thread(target=request, args=(-1,))
    filler.start()
    filler.join()
    wait_until(taken)

if MODE == "session":
    session()  # its End is recorded now; the requests below push it out of the queue
for n in range(SEQUENCES):
    request(n)
if MODE == "exit":
    print("emitted {}", flush=True)
    sys.exit(0)
if MODE == "wait-spooled":
    wait_until(lambda: taken() and tracer.stats().spooled_batches > 0)
else:
    wait_until(lambda: taken() and tracer.stats().dropped_events > 0)
report("waiting")
sys.stdin.readline()
report("done", acknowledged=tracer.flush(timeout_s=60))
"""

EVENTS_PER_SEQUENCE = 10


def outage_script(directory: Path) -> Path:
    return write_script(directory / "outage.py", OUTAGE)


def spooled_records(directory: Path) -> list[spool.Record]:
    """Every whole record in the spool files of ``directory`` (read only)."""
    return [
        record for path in sorted(directory.glob("*.spool")) for record in spool.read_file(path)
    ]


def finish(program: Program) -> dict[str, Any]:
    """The stats the program printed after its tracer shut down; it must exit 0."""
    exited: dict[str, Any] = program.expect("exited")
    assert program.wait() == 0, program.stderr()
    return exited

"""A traced program given several repository nodes spreads its batches over them, and a node
with nothing listening costs it nothing: real `cmr serve` processes, real sockets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.reliability.cluster import cmr_json, nodes
from tests.reliability.conftest import Launcher
from tests.reliability.harness import free_endpoint
from tests.support import write_script

#: ``python spread.py SEQUENCES NODES``: each sequence is ``spread.request`` calling
#: ``spread.step`` four times (ten events). First, emitting nothing, it waits (bounded) until NODES
#: nodes acknowledged a heartbeat (every node that listens is connected); then SEQUENCES, with a
#: flush every 25, which makes many batches. Prints ``done`` with ``tracer.stats()`` after
#: shutting the tracer down.
SPREAD = """
import dataclasses, json, sys, threading, time
import tracer

@tracer.traced(name="spread.request")
def request(n):
    for k in range(4):
        step(n, k)

@tracer.traced(name="spread.step")
def step(n, k):
    return n * k

def answered():
    return sum(1 for batches in tracer.stats().acked_by_endpoint.values() if batches)

tracer.configure()  # the sender starts now, and its heartbeats go to the nodes in turn
deadline = time.monotonic() + 60
while answered() < int(sys.argv[2]):
    if time.monotonic() > deadline:
        sys.exit(f"not {sys.argv[2]} nodes answered within 60 s: {tracer.stats()}")
    threading.Event().wait(0.01)
for n in range(int(sys.argv[1])):
    request(n)
    if n % 25 == 24:
        assert tracer.flush(timeout_s=60)
acknowledged = tracer.shutdown()
stats = dataclasses.asdict(tracer.stats())
print("done", json.dumps({"acknowledged": acknowledged, **stats}))
"""

SEQUENCES = 1000
EVENTS_PER_SEQUENCE = 10
#: Nothing is resent in these runs (each batch is stored where it was acknowledged first):
#: a batch waiting on a node for this long would fail the test by its time limit instead.
NO_RESENDS = {"INVOSEQ_RESEND_MS": "600000", "INVOSEQ_FLUSH_TIMEOUT_MS": "600000"}
#: Heartbeats often enough that the first wait is short.
SETTINGS = {**NO_RESENDS, "INVOSEQ_HEARTBEAT_MS": "50"}


def run_spread(launch: Launcher, endpoints: list[str], listening: int) -> dict[str, Any]:
    """Run the program against ``endpoints``, of which ``listening`` have a node."""
    script = write_script(launch.tmp_path / "spread.py", SPREAD)
    joined = ",".join(endpoints)
    program = launch.program(script, str(SEQUENCES), str(listening), endpoint=joined, **SETTINGS)
    done: dict[str, Any] = program.expect("done")
    assert program.wait() == 0, program.stderr()
    assert done["acknowledged"], done
    assert (done["dropped_events"], done["spooled_batches"], done["resent_batches"]) == (0, 0, 0)
    assert done["sent_events"] == SEQUENCES * EVENTS_PER_SEQUENCE
    return done


def test_batches_spread_over_two_nodes_and_together_they_hold_everything_once(
    tmp_path: Path, launch: Launcher
) -> None:
    # Two nodes on two separate files: what each stored is what it acknowledged.
    files = [str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")]
    with nodes(files, tmp_path) as (a, b):
        done = run_spread(launch, [a.endpoint, b.endpoint], listening=2)
    stats = [cmr_json(file, "stats") for file in files]
    batches = [s["batches"] for s in stats]
    assert min(batches) >= done["acked_batches"] // 3, batches  # each took a fair share
    assert done["acked_by_endpoint"] == {a.endpoint: batches[0], b.endpoint: batches[1]}
    assert sum(batches) == done["acked_batches"]
    assert [s["duplicate_batches"] for s in stats] == [0, 0]
    assert sum(s["events"] for s in stats) == SEQUENCES * EVENTS_PER_SEQUENCE


def test_a_listed_node_with_nothing_listening_costs_nothing(
    tmp_path: Path, launch: Launcher
) -> None:
    nobody = free_endpoint()  # nothing listens here, for the whole run
    db = str(tmp_path / "cmr.sqlite")
    with nodes([db], tmp_path) as (alive,):
        done = run_spread(launch, [nobody, alive.endpoint], listening=1)
    assert done["acked_by_endpoint"] == {nobody: 0, alive.endpoint: done["acked_batches"]}
    stats = cmr_json(db, "stats")
    assert stats["events"] == SEQUENCES * EVENTS_PER_SEQUENCE
    assert [(p["pid"], p["ended"], p["dropped"]) for p in stats["processes"]] == [
        (launch_pid(stats), True, 0)
    ]
    listed = cmr_json(db, "ls", "--limit", str(SEQUENCES + 10))
    assert len(listed) == SEQUENCES
    assert {(s["root"], s["invocations"], s["status"]) for s in listed} == {
        ("__main__.spread.request", 5, "complete")
    }


def launch_pid(stats: dict[str, Any]) -> int:
    """The one traced process's pid (not this test's)."""
    [pid] = [p["pid"] for p in stats["processes"]]
    assert pid != os.getpid()
    return int(pid)

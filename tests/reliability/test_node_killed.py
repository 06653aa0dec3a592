"""Two `cmr serve` nodes on one shared database, three traced programs spreading their batches
over both, and one node killed (SIGKILL) mid-run with batches in flight: every sequence is whole,
nothing is dropped or stored twice, and `cmr show` reads the same JSON through either node's
settings.

The work is fixed by count, never by time: each program emits exactly ``SEQUENCES``, so a fast
machine and a slow one run the same test. The doomed node is frozen (SIGSTOP) mid-stream, while
the programs' batches are on their way to both nodes; the batches the programs send it after that
are certainly in flight, unacknowledged, when it is killed.

Runs on a shared SQLite file always (SQLite serialises the two writers), and on PostgreSQL when
``INVOSEQ_TEST_PG`` names a server (skipped, with the reason, otherwise; failed when
``INVOSEQ_REQUIRE`` lists ``postgres``)."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.cluster import cmr_json, cmr_out, nodes
from tests.reliability.conftest import Launcher
from tests.reliability.harness import Program, broadcast
from tests.requirements import postgres_database
from tests.support import shape, show_every_sequence, write_script

#: ``python streamer.py TAG FIRST BURST``. Each sequence is ``TAG.request`` calling ``TAG.step``
#: three times, each step hashing a block. First FIRST sequences, each stored before the next
#: (the nodes take turns); then, bounded in time, it waits until both nodes acknowledged a batch
#: (a node that connected late gets the next heartbeat) and prints ``ready``. Then, line by line
#: from stdin: ``burst`` emits BURST sequences and, once the sender has taken them all (not
#: waiting for acknowledgements), prints ``emitted``; ``flush`` flushes and prints ``flushed``;
#: ``stop`` shuts the tracer down and prints ``done``: each with its sequence count and
#: ``tracer.stats()``. Every wait is bounded (60 s), polling the tracer's counters.
STREAMER = """
import dataclasses, hashlib, json, os, sys, threading, time
import tracer

TAG, FIRST, BURST = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
BLOCK = os.urandom(256 * 1024)

@tracer.traced(name=f"{TAG}.request")
def request(n):
    return [step(n, k) for k in range(3)]

@tracer.traced(name=f"{TAG}.step")
def step(n, k):
    digest = hashlib.sha256(BLOCK)
    digest.update(b"%d:%d" % (n, k))
    return digest.digest()

def report(word, acknowledged):
    stats = dataclasses.asdict(tracer.stats())
    print(word, json.dumps({"sequences": sent, "acknowledged": acknowledged, **stats}), flush=True)

def wait_until(condition, what):
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f"not {what} within 60 s: {tracer.stats()}")
        threading.Event().wait(0.005)

sent = 0
for _ in range(FIRST):
    request(sent)
    sent += 1
    assert tracer.flush(timeout_s=60), tracer.stats()
acked = lambda: min(tracer.stats().acked_by_endpoint.values(), default=0) > 0
wait_until(acked, "acknowledged by both nodes")  # heartbeats go on meanwhile
report("ready", True)
for line in sys.stdin:
    command = line.strip()
    if command == "burst":
        for _ in range(BURST):
            request(sent)
            sent += 1
        wait_until(lambda: tracer.stats().buffered_events == 0, "taken by the sender")
        report("emitted", None)
    elif command == "flush":
        report("flushed", tracer.flush(timeout_s=60))
    elif command == "stop":
        break
report("done", tracer.shutdown())
"""

TAGS = ("alpha", "beta", "gamma")
FIRST = 20
BURST = 40
SEQUENCES = FIRST + 2 * BURST  # per program: the first ones, a burst before the freeze, one after
CALLS_PER_SEQUENCE = 4
SETTINGS = {
    "INVOSEQ_RESEND_MS": "300",  # move a dead node's batches soon
    "INVOSEQ_FLUSH_TIMEOUT_MS": "60000",
    "INVOSEQ_FLUSH_INTERVAL_MS": "20",
    # A burst's 320 events make at least five batches, so both nodes get some of each burst.
    "INVOSEQ_BATCH_EVENTS": "64",
    "INVOSEQ_HEARTBEAT_MS": "100",  # a node that connected late answers within ready's wait
}


@pytest.fixture(
    name="database", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def fixture_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The database both nodes share (a SQLite file, or a fresh PostgreSQL schema), as each node
    is told it: two spellings of the same place, as two hosts' settings would differ."""
    if request.param == "sqlite":
        (tmp_path / "b").mkdir()
        yield str(tmp_path / "shared.sqlite"), str(tmp_path / "b" / ".." / "shared.sqlite")
        return
    with postgres_database("nodes") as url:
        yield url, f"{url}&application_name=invoseq-node-b"


def test_a_node_killed_mid_run_loses_nothing_and_either_node_reads_the_same(
    tmp_path: Path, launch: Launcher, database: tuple[str, str]
) -> None:
    script = write_script(tmp_path / "streamer.py", STREAMER)
    with nodes(list(database), tmp_path) as (doomed, survivor):
        endpoints = f"{doomed.endpoint},{survivor.endpoint}"
        programs = {
            tag: launch.program(script, tag, str(FIRST), str(BURST), endpoint=endpoints, **SETTINGS)
            for tag in TAGS
        }
        # A known part of the work is stored: each program's first sequences (the program
        # checked their acknowledgements), some of its batches by each node.
        for program in programs.values():
            ready = program.expect("ready")
            assert set(ready["acked_by_endpoint"]) == {doomed.endpoint, survivor.endpoint}
            assert min(ready["acked_by_endpoint"].values()) > 0, ready

        # All three stream; the doomed node stops where it is, maybe with batches half stored;
        # the next burst sends it batches it never acknowledges.
        broadcast(programs.values(), "burst", "emitted")
        doomed.freeze()
        broadcast(programs.values(), "burst", "emitted")
        doomed.kill()
        # Everything each program emitted is acknowledged, what the dead node held too.
        for flushed in broadcast(programs.values(), "flush", "flushed"):
            assert flushed["acknowledged"], flushed
        done = {tag: finish(program) for tag, program in programs.items()}

    for tag, report in done.items():
        assert report["sequences"] == SEQUENCES, (tag, report)
        assert report["acknowledged"], (tag, report)
        assert (report["dropped_events"], report["spooled_events"]) == (0, 0), (tag, report)
        # Batches were in flight on the doomed node when it died: sent again, to the survivor.
        assert report["resent_batches"] > 0, (tag, report)
    assert_stored_once_and_whole(database[1], programs, done)  # through the survivor's setting
    assert_either_node_reads_the_same(*database, done)


def finish(program: Program) -> dict[str, Any]:
    program.say("stop")
    report: dict[str, Any] = program.expect("done")
    assert program.wait() == 0, program.stderr()
    return report


def assert_stored_once_and_whole(
    db: str, programs: dict[str, Program], done: dict[str, dict[str, Any]]
) -> None:
    """Every event once: the repository's counts equal what the programs emitted and had
    acknowledged, and every sequence is its program's request with three steps."""
    stats = cmr_json(db, "stats")
    calls = {
        programs[tag].pid: report["sequences"] * CALLS_PER_SEQUENCE for tag, report in done.items()
    }
    assert stats["events"] == 2 * sum(calls.values())
    assert stats["batches"] == sum(report["acked_batches"] for report in done.values())
    ended = {p["pid"]: (p["ended"], p["dropped"]) for p in stats["processes"]}
    assert ended == dict.fromkeys(calls, (True, 0))

    total = sum(report["sequences"] for report in done.values())
    listed = cmr_json(db, "ls", "--limit", str(total + 10))
    assert len(listed) == total
    roots = collections.Counter(summary["root"] for summary in listed)
    assert roots == {f"__main__.{tag}.request": report["sequences"] for tag, report in done.items()}
    assert {(s["invocations"], s["processes"], s["status"]) for s in listed} == {
        (CALLS_PER_SEQUENCE, 1, "complete")
    }


def assert_either_node_reads_the_same(
    first: str, second: str, done: dict[str, dict[str, Any]]
) -> None:
    """`cmr show --json` of every sequence, through each node's database setting (each read
    through one store): identical, and exactly the tree the program made. One per program also
    through the real command."""
    through_first = show_every_sequence(first)
    assert show_every_sequence(second) == through_first
    assert len(through_first) == len(done) * SEQUENCES
    shown_once: set[str] = set()
    for seq, document in through_first.items():
        root = json.loads(document)["root"]
        tag = root["name"].removeprefix("__main__.").removesuffix(".request")
        assert shape(root) == {
            "name": f"__main__.{tag}.request",
            "status": "ok",
            "children": [{"name": f"__main__.{tag}.step", "status": "ok"}] * 3,
        }
        if tag not in shown_once:
            shown_once.add(tag)
            assert cmr_out(second, "show", seq, "--json").strip() == document
    assert shown_once == set(done)

"""Two `cmr serve` nodes on one shared database, three traced programs spreading their batches
over both, and one node killed (SIGKILL) mid-run: every sequence is whole, nothing is dropped or
stored twice, and `cmr show` reads the same JSON through either node's settings.

Runs on a shared SQLite file always (SQLite serialises the two writers), and on PostgreSQL when
``INVOSEQ_TEST_PG`` names a server (skipped, with the reason, otherwise)."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.cluster import (
    cmr_in_process,
    cmr_json,
    cmr_out,
    nodes,
    postgres_database,
)
from tests.reliability.conftest import Launcher
from tests.reliability.harness import Program
from tests.support import shape, write_script

#: Each sequence is ``TAG.request`` calling ``TAG.step`` three times, each step hashing a block,
#: so the program is paced by its own work. It streams until both nodes acknowledged some of its
#: batches, flushes and prints ``ready``; then streams on. On ``flush`` it flushes and prints
#: ``flushed``; on ``stop`` it shuts the tracer down and prints ``done``: each with its
#: sequence count and ``tracer.stats()``.
STREAMER = """
import dataclasses, hashlib, json, os, queue, sys, threading
import tracer

TAG = sys.argv[1]
BLOCK = os.urandom(1024 * 1024)

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

commands = queue.Queue()
def read_commands():
    for line in sys.stdin:
        commands.put(line.strip())
threading.Thread(target=read_commands, daemon=True).start()
sent = 0
while sent < 20 or min(tracer.stats().acked_by_endpoint.values(), default=0) == 0:
    request(sent)
    sent += 1
report("ready", tracer.flush(timeout_s=60))
while True:
    try:
        command = commands.get_nowait()
    except queue.Empty:
        command = None
    if command == "flush":
        report("flushed", tracer.flush(timeout_s=60))
    elif command == "stop":
        break
    request(sent)
    sent += 1
report("done", tracer.shutdown())
"""

TAGS = ("alpha", "beta", "gamma")
CALLS_PER_SEQUENCE = 4
SETTINGS = {
    "INVOSEQ_RESEND_MS": "300",  # move a dead node's batches soon
    "INVOSEQ_FLUSH_TIMEOUT_MS": "60000",
    "INVOSEQ_FLUSH_INTERVAL_MS": "20",  # many small batches, some in flight at the kill
}


@pytest.fixture(name="database", params=["sqlite", "postgresql"])
def fixture_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The database both nodes share (a SQLite file, or a fresh PostgreSQL schema), as each node
    is told it: two spellings of the same place, as two hosts' settings would differ."""
    if request.param == "sqlite":
        (tmp_path / "b").mkdir()
        yield str(tmp_path / "shared.sqlite"), str(tmp_path / "b" / ".." / "shared.sqlite")
        return
    with postgres_database() as url:
        yield url, f"{url}&application_name=invoseq-node-b"


def test_a_node_killed_mid_run_loses_nothing_and_either_node_reads_the_same(
    tmp_path: Path, launch: Launcher, database: tuple[str, str]
) -> None:
    script = write_script(tmp_path / "streamer.py", STREAMER)
    with nodes(list(database), tmp_path) as (doomed, survivor):
        endpoints = f"{doomed.endpoint},{survivor.endpoint}"
        programs = {
            tag: launch.program(script, tag, endpoint=endpoints, **SETTINGS) for tag in TAGS
        }
        # A known part of the work is stored: each program's first sequences, acknowledged,
        # and some of its batches by each node.
        for program in programs.values():
            ready = program.expect("ready")
            assert ready["acknowledged"], ready
            assert set(ready["acked_by_endpoint"]) == {doomed.endpoint, survivor.endpoint}
            assert min(ready["acked_by_endpoint"].values()) > 0, ready

        doomed.kill()  # while all three stream
        # Everything each program emitted until now is acknowledged, what the dead node held too.
        for program in programs.values():
            program.say("flush")
            flushed = program.expect("flushed")
            assert flushed["acknowledged"], flushed
        done = {tag: finish(program) for tag, program in programs.items()}

    for tag, report in done.items():
        assert report["acknowledged"], (tag, report)
        assert (report["dropped_events"], report["spooled_events"]) == (0, 0), (tag, report)
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
    """`cmr show --json` of every sequence, through each node's database setting: identical,
    and exactly the tree the program made. One per program also through the real command."""
    listed = json.loads(cmr_in_process(first, "ls", "--json", "--limit", "100000"))
    shown_once: set[str] = set()
    for summary in listed:
        seq, root = summary["seq"], summary["root"]
        through_first = cmr_in_process(first, "show", seq, "--json")
        assert cmr_in_process(second, "show", seq, "--json") == through_first, seq
        tag = root.removeprefix("__main__.").removesuffix(".request")
        assert shape(json.loads(through_first)["root"]) == {
            "name": root,
            "status": "ok",
            "children": [{"name": f"__main__.{tag}.step", "status": "ok"}] * 3,
        }
        if tag not in shown_once:
            shown_once.add(tag)
            assert cmr_out(second, "show", seq, "--json").strip() == through_first.strip()
    assert shown_once == set(done)

"""`cmr serve` killed (SIGKILL) while several traced programs stream to it, then started again on
the same address and file: every event the programs emitted is stored, exactly once.

The work is fixed by count: each program emits exactly ``SEQUENCES``. The repository is frozen
(SIGSTOP) mid-stream and killed after the programs sent it their next burst, so batches are
certainly in flight, unacknowledged, when it dies."""

from __future__ import annotations

import collections
import time
from pathlib import Path

from cmr.store import open_store
from tests.reliability.conftest import Launcher
from tests.reliability.harness import broadcast, query, stored_by_pid
from tests.support import cmr_json, shape, wait_for, write_script

#: ``python streamer.py TAG FIRST BURST``. Each sequence is ``TAG.request`` calling ``TAG.step``
#: three times, each step hashing a block. First FIRST sequences, then a flush, and ``ready``;
#: then, line by line from stdin: ``burst`` emits BURST sequences and, once the sender has taken
#: them all (not waiting for acknowledgements; bounded, 60 s), prints ``emitted``; ``stop``
#: shuts the tracer down and prints ``done`` with the sequence count and ``tracer.stats()``.
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

def emit(count):
    global sent
    for _ in range(count):
        request(sent)
        sent += 1

sent = 0
emit(FIRST)
print("ready", json.dumps({"acknowledged": tracer.flush(timeout_s=60)}), flush=True)
for line in sys.stdin:
    if line.strip() == "stop":
        break
    assert line.strip() == "burst", line
    emit(BURST)
    deadline = time.monotonic() + 60
    while tracer.stats().buffered_events:
        if time.monotonic() > deadline:
            sys.exit(f"the sender took nothing for 60 s: {tracer.stats()}")
        threading.Event().wait(0.005)
    print("emitted {}", flush=True)
acknowledged = tracer.shutdown()
report = {"sequences": sent, "acknowledged": acknowledged, **dataclasses.asdict(tracer.stats())}
print("done", json.dumps(report), flush=True)
"""

TAGS = ("alpha", "beta", "gamma")
FIRST = 20
BURST = 40
SEQUENCES = FIRST + 2 * BURST  # per program: the first ones, a burst before the freeze, one after
CALLS_PER_SEQUENCE = 4
SETTINGS = {
    "INVOSEQ_RESEND_MS": "200",  # resend soon after the restart
    "INVOSEQ_FLUSH_TIMEOUT_MS": "60000",  # room for the restart before exit gives up
    "INVOSEQ_FLUSH_INTERVAL_MS": "20",
    "INVOSEQ_BATCH_EVENTS": "64",  # a burst's 320 events make at least five batches
}


def heard_from_since(db: Path, pids: set[int], since_ns: int) -> bool:
    rows = query(db, "SELECT pid FROM processes WHERE last_seen_ns > ?", since_ns)
    return pids <= {pid for (pid,) in rows}


def test_a_repository_killed_mid_stream_and_restarted_stores_every_event_once(
    tmp_path: Path, launch: Launcher
) -> None:
    script = write_script(tmp_path / "streamer.py", STREAMER)
    repository = launch.repository()
    repository.start()
    programs = {
        tag: launch.program(
            script, tag, str(FIRST), str(BURST), endpoint=repository.endpoint, **SETTINGS
        )
        for tag in TAGS
    }
    for program in programs.values():
        assert program.expect("ready") == {"acknowledged": True}

    # All three stream: freeze the repository under them, send it a burst it never
    # acknowledges, crash it, and bring it back.
    broadcast(programs.values(), "burst", "emitted")
    repository.freeze()
    broadcast(programs.values(), "burst", "emitted")
    killed_ns = time.time_ns()
    repository.kill()
    repository.start()
    pids = {program.pid for program in programs.values()}
    wait_for(
        lambda: heard_from_since(repository.db, pids, killed_ns), timeout_s=60, interval_s=0.05
    )

    for program in programs.values():
        program.say("stop")
    done = {tag: program.expect("done") for tag, program in programs.items()}
    for tag, program in programs.items():
        assert program.wait() == 0, program.stderr()
        assert done[tag]["sequences"] == SEQUENCES, (tag, done[tag])
        assert done[tag]["acknowledged"], (tag, done[tag])
        assert done[tag]["dropped_events"] == 0, (tag, done[tag])
        assert done[tag]["spooled_events"] == 0, (tag, done[tag])
        assert done[tag]["resent_batches"] > 0, (tag, done[tag])  # in flight at the crash

    # Counts: per process, every Start and End is stored; in total, no batch counted twice.
    emitted = {programs[tag].pid: done[tag]["sequences"] * CALLS_PER_SEQUENCE for tag in TAGS}
    assert stored_by_pid(repository.db) == {pid: (calls, calls) for pid, calls in emitted.items()}
    stats = cmr_json(repository.db, "stats")
    assert stats["events"] == 2 * sum(emitted.values())
    ended = {p["pid"]: (p["ended"], p["dropped"]) for p in stats["processes"]}
    assert ended == dict.fromkeys(emitted, (True, 0))

    # Content: each program's sequences are whole, under its own names.
    total = sum(done[tag]["sequences"] for tag in TAGS)
    listed = cmr_json(repository.db, "ls", "--limit", str(total + 10))
    assert len(listed) == total
    by_root = collections.Counter(summary["root"] for summary in listed)
    assert by_root == {f"__main__.{tag}.request": done[tag]["sequences"] for tag in TAGS}
    assert {(s["invocations"], s["processes"], s["status"]) for s in listed} == {
        (CALLS_PER_SEQUENCE, 1, "complete")
    }
    assert_every_sequence_has_its_steps(repository.db)
    for tag in TAGS:  # and one of each, through `cmr show`, as a user reads it
        seq = next(s["seq"] for s in listed if s["root"] == f"__main__.{tag}.request")
        tree = cmr_json(repository.db, "show", seq)
        assert shape(tree["root"]) == {
            "name": f"__main__.{tag}.request",
            "status": "ok",
            "children": [{"name": f"__main__.{tag}.step", "status": "ok"}] * 3,
        }


def assert_every_sequence_has_its_steps(db: Path) -> None:
    """Every stored sequence: one root ``X.request`` with three ``X.step`` children, all ended."""
    store = open_store(str(db), readonly=True)
    try:
        rows = []
        for summary in store.list_sequences(10**9):
            data = store.load_sequence(summary.seq, samples=False)
            rows += [
                (data.seq, r.parent, r.iid, data.methods[r.puid, r.method].qualname, r.end_ns)
                for r in data.invocations
            ]
    finally:
        store.close()
    calls: dict[bytes, list[tuple[int, int, str, bool]]] = collections.defaultdict(list)
    for seq, parent, iid, name, end_ns in rows:
        calls[seq].append((parent, iid, name, end_ns is not None))
    for seq, invocations in calls.items():
        [root] = [c for c in invocations if c[0] == 0]
        tag = root[2].removesuffix(".request")
        children = sorted((parent, name, ended) for parent, _, name, ended in invocations)
        assert children == [(0, f"{tag}.request", True)] + [(root[1], f"{tag}.step", True)] * 3, (
            seq.hex(),
            invocations,
        )

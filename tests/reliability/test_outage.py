"""The repository down while a traced program runs: memory queue, then disk spool, then counted
drops that name the sequences they cut; and a program that exits while it is down leaves its
batches to its next run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.reliability.conftest import Launcher
from tests.reliability.harness import PATIENCE_S, stored_by_pid
from tests.reliability.programs import (
    EVENTS_PER_SEQUENCE,
    finish,
    outage_script,
    spooled_records,
)
from tests.support import cmr_json, wait_for

SMALL = {
    "INVOSEQ_BATCH_EVENTS": "16",  # 1.6 sequences a batch
    "INVOSEQ_QUEUE_BATCHES": "2",  # memory holds two batches; the rest must go to disk
    "INVOSEQ_FLUSH_TIMEOUT_MS": "60000",
    "INVOSEQ_RESEND_MS": "200",
}


def test_an_outage_longer_than_the_memory_queue_loses_nothing(
    tmp_path: Path, launch: Launcher
) -> None:
    sequences = 60
    repository = launch.repository()
    program = launch.program(
        outage_script(tmp_path),
        "wait-spooled",
        str(sequences),
        endpoint=repository.endpoint,
        **SMALL,
    )
    assert program.expect("waiting")["spooled_batches"] > 0
    # Far more batches than the queue holds: all but the last few go to disk.
    emitted = sequences * EVENTS_PER_SEQUENCE
    wait_for(lambda: sum(r.events for r in spooled_records(launch.spool_dir)) >= emitted - 3 * 16)

    repository.start()
    program.say("go")
    done = program.expect("done")
    exited = finish(program)

    assert done["acknowledged"]
    assert (exited["sent_events"], exited["dropped_events"]) == (emitted, 0)
    assert stored_by_pid(repository.db) == {program.pid: (emitted // 2, emitted // 2)}
    listed = cmr_json(repository.db, "ls", "--limit", "1000")
    assert (
        sorted((s["root"], s["invocations"], s["status"], s["lossy"]) for s in listed)
        == [("__main__.outage.request", 5, "complete", False)] * sequences
    )
    assert list(launch.spool_dir.glob("*.spool")) == []  # replayed, then removed


def test_an_outage_past_the_spool_bound_counts_every_dropped_event(
    tmp_path: Path, launch: Launcher
) -> None:
    sequences = 60
    repository = launch.repository()
    program = launch.program(
        outage_script(tmp_path),
        "wait-dropped",
        str(sequences),
        endpoint=repository.endpoint,
        INVOSEQ_SPOOL_BYTES="3000",  # room for a few batches only
        **SMALL,
    )
    waiting = program.expect("waiting")
    assert waiting["dropped_events"] > 0
    assert waiting["spooled_batches"] > 0
    assert sum(p.stat().st_size for p in launch.spool_dir.glob("*.spool")) <= 3000

    repository.start()
    program.say("go")
    done = program.expect("done")
    exited = finish(program)

    # emitted = stored + dropped, exactly; the repository knows the same count of drops.
    emitted = sequences * EVENTS_PER_SEQUENCE
    dropped = exited["dropped_events"]
    assert done["acknowledged"]
    assert exited["sent_events"] + dropped == emitted
    starts, ends = stored_by_pid(repository.db)[program.pid]
    assert starts + ends + dropped == emitted
    stats = cmr_json(repository.db, "stats")
    assert stats["events"] == emitted - dropped
    assert [(p["pid"], p["dropped"]) for p in stats["processes"]] == [(program.pid, dropped)]

    # The sequences that lost events are marked lossy, and only those.
    listed = cmr_json(repository.db, "ls", "--limit", "1000")
    assert all("lossy" in s for s in listed), "cmr ls --json has no 'lossy' key"
    whole = {s["seq"] for s in listed if (s["invocations"], s["status"]) == (5, "complete")}
    assert {s["seq"] for s in listed if s["lossy"]} == {s["seq"] for s in listed} - whole
    assert 0 < len(whole) < sequences  # the spool kept some, the drops cut others


def test_a_sequence_that_lost_only_its_end_is_marked_lossy(
    tmp_path: Path, launch: Launcher
) -> None:
    repository = launch.repository()
    repository.start()
    program = launch.program(
        outage_script(tmp_path),
        "session",
        "10",
        endpoint=repository.endpoint,
        INVOSEQ_SPOOL_BYTES="0",  # no spool: what leaves the queue is dropped
        INVOSEQ_MAX_INFLIGHT_BATCHES="1",
        **SMALL,
    )
    assert program.expect("opened")["acknowledged"]  # the session's Start is stored
    repository.kill()
    program.say("close the session")
    waiting = program.expect("waiting")
    repository.start()
    program.say("go")
    assert program.expect("done")["acknowledged"]
    exited = finish(program)

    dropped = exited["dropped_events"]
    assert dropped >= waiting["dropped_events"] > 0
    starts, ends = stored_by_pid(repository.db)[program.pid]
    # The session and its step, the filler sequence, then ten more.
    assert starts + ends + dropped == (2 + 5 + 10 * 5) * 2
    [session] = [
        s for s in cmr_json(repository.db, "ls", "--limit", "100") if "session" in s["root"]
    ]
    assert (session["status"], session["lossy"]) == ("incomplete", True)
    tree = cmr_json(repository.db, "show", session["seq"])
    assert (tree["root"]["status"], tree["lossy"]) == ("incomplete", True)


@pytest.mark.timing
def test_a_program_that_exits_while_the_repository_is_down_sends_its_batches_next_run(
    tmp_path: Path, launch: Launcher
) -> None:
    repository = launch.repository()
    outage = outage_script(tmp_path)
    first = launch.program(
        outage, "exit", "30", endpoint=repository.endpoint, INVOSEQ_FLUSH_TIMEOUT_MS="500"
    )
    first.expect("emitted")
    emitted_at = time.monotonic()
    exited = finish(first)
    # It waited for the repository no longer than its flush timeout (plus generous slack).
    assert time.monotonic() - emitted_at < 0.5 + PATIENCE_S / 4
    first_events = 30 * EVENTS_PER_SEQUENCE
    assert (exited["sent_events"], exited["dropped_events"]) == (0, 0)
    assert exited["spooled_events"] == first_events
    assert sum(r.events for r in spooled_records(launch.spool_dir)) == first_events

    repository.start()
    second = launch.program(outage, "exit", "7", endpoint=repository.endpoint)
    second.expect("emitted")
    finish(second)

    second_events = 7 * EVENTS_PER_SEQUENCE
    assert stored_by_pid(repository.db) == {
        first.pid: (first_events // 2, first_events // 2),
        second.pid: (second_events // 2, second_events // 2),
    }
    assert cmr_json(repository.db, "stats")["events"] == first_events + second_events
    listed = cmr_json(repository.db, "ls", "--limit", "1000")
    assert sorted((s["invocations"], s["status"]) for s in listed) == [(5, "complete")] * 37
    assert list(launch.spool_dir.glob("*.spool")) == []

"""A spool file cut short by a crash: the next run of the program replays it up to its last whole
batch and counts what the cut took."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.conftest import Launcher
from tests.reliability.harness import stored_by_pid
from tests.reliability.programs import EVENTS_PER_SEQUENCE, finish, outage_script
from tests.support import cmr_json
from tracer._shipping import spool


@pytest.mark.parametrize("cut", ["body", "header"])
def test_a_spool_cut_mid_record_is_replayed_to_its_last_whole_batch(
    tmp_path: Path, launch: Launcher, cut: str
) -> None:
    repository = launch.repository()
    outage = outage_script(tmp_path)
    first = launch.program(
        outage,
        "exit",
        "30",
        endpoint=repository.endpoint,
        INVOSEQ_BATCH_EVENTS="16",
        INVOSEQ_FLUSH_TIMEOUT_MS="300",
    )
    first.expect("emitted")
    assert finish(first)["spooled_events"] == 30 * EVENTS_PER_SEQUENCE
    [path] = launch.spool_dir.glob("*.spool")
    records = spool.read_file(path)

    # A crash while writing the last record that holds events: the file ends inside it (what
    # follows, the final empty batch, was never written).
    size = path.stat().st_size
    slot = spool.SLOT_BYTES  # the file begins with the report slot, empty: nothing was dropped
    header = (size - slot - sum(len(r.body) for r in records)) // len(records)
    victim = max(n for n, r in enumerate(records) if r.events)
    offset = slot + sum(header + len(r.body) for r in records[:victim])
    kept = offset + (header + len(records[victim].body) // 2 if cut == "body" else header // 2)
    with path.open("r+b") as damaged:
        damaged.truncate(kept)
    whole = sum(r.events for r in records[:victim])

    repository.start()
    second = launch.program(outage, "exit", "7", endpoint=repository.endpoint)
    second.expect("emitted")
    exited = finish(second)

    lost = records[victim].events
    if cut == "body":  # the header says how many events the cut record held
        assert (exited["spool_lost_events"], exited["spool_lost_records"]) == (lost, 0)
    else:  # the header itself is cut: the record is counted, its events are unknown
        assert (exited["spool_lost_events"], exited["spool_lost_records"]) == (0, 1)
    assert "is cut short" in second.stderr()
    second_events = 7 * EVENTS_PER_SEQUENCE
    stored = {pid: starts + ends for pid, (starts, ends) in stored_by_pid(repository.db).items()}
    assert stored == {first.pid: whole, second.pid: second_events}
    assert whole + lost == 30 * EVENTS_PER_SEQUENCE
    assert cmr_json(repository.db, "stats")["events"] == whole + second_events
    assert list(launch.spool_dir.glob("*.spool")) == []  # replayed, then removed

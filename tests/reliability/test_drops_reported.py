"""Drops the repository learns of although no batch sent after them reached it: a program that
drops (its spool full) and exits while the repository is away leaves its counters in its spool's
report slot, and the next run of the program, replaying the spool, tells the repository."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.conftest import Launcher
from tests.reliability.harness import Repository, stored_by_pid
from tests.reliability.programs import EVENTS_PER_SEQUENCE, finish, outage_script
from tests.support import cmr_json

SMALL = {
    "INVOSEQ_BATCH_EVENTS": "16",  # 1.6 sequences a batch
    "INVOSEQ_QUEUE_BATCHES": "2",  # memory holds two batches; the rest must go to disk
    "INVOSEQ_FLUSH_TIMEOUT_MS": "300",
}


def run_while_down(
    launch: Launcher, repository: Repository, sequences: int, **settings: str
) -> tuple[int, dict[str, Any]]:
    """Run the program with the repository away; it drops and exits: (pid, its last stats)."""
    first = launch.program(
        outage_script(launch.tmp_path),
        "exit",
        str(sequences),
        endpoint=repository.endpoint,
        **settings,
    )
    first.expect("emitted")
    exited = finish(first)
    assert exited["dropped_events"] > 0
    assert exited["sent_events"] == 0
    return first.pid, exited


def replay_and_check(
    launch: Launcher,
    repository: Repository,
    first_pid: int,
    exited: dict[str, Any],
    emitted: int,
    *,
    must_cut: bool,
) -> None:
    """Start the repository, run the program once more (it replays the first run's spool), and
    check that the repository shows the first run's drops and marks its cut sequences lossy."""
    repository.start()
    second = launch.program(
        outage_script(launch.tmp_path), "exit", "1", endpoint=repository.endpoint
    )
    second.expect("emitted")
    finish(second)

    dropped = exited["dropped_events"]
    processes = cmr_json(repository.db, "stats")["processes"]
    [process] = [p for p in processes if p["pid"] == first_pid]
    assert process["dropped"] == dropped
    starts, ends = stored_by_pid(repository.db)[first_pid]
    assert starts + ends + dropped == emitted
    listed = cmr_json(repository.db, "ls", "--limit", "100000")
    cut = [s for s in listed if s["invocations"] != 5 or s["status"] != "complete"]
    # The sequences stored in part (``must_cut``: one at least, where the last batch the spool
    # took ends) are lossy; the whole ones are not.
    assert cut or not must_cut
    assert all(s["lossy"] for s in cut), cut
    assert not any(s["lossy"] for s in listed if s not in cut)


def test_drops_past_a_full_spool_at_exit_reach_the_repository_with_the_replay(
    launch: Launcher,
) -> None:
    repository = launch.repository()
    sequences = 60
    pid, exited = run_while_down(
        launch, repository, sequences, INVOSEQ_SPOOL_BYTES="20000", **SMALL
    )
    replay_and_check(
        launch, repository, pid, exited, sequences * EVENTS_PER_SEQUENCE, must_cut=True
    )


@pytest.fixture(name="full_disk")
def fixture_full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs for the spool: the disk fills long before the spool's own bound."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "spool"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", str(mount)], check=True, capture_output=True)


def test_drops_on_a_full_disk_reach_the_repository_with_the_replay(
    launch: Launcher, full_disk: Path
) -> None:
    assert full_disk == launch.spool_dir
    repository = launch.repository()
    sequences = 20_000  # 200,000 events: about 6 MiB encoded, three times the disk
    pid, exited = run_while_down(launch, repository, sequences, INVOSEQ_FLUSH_TIMEOUT_MS="300")
    # Batches of 4,096 events end where sequences end every fifth batch: none may be cut.
    replay_and_check(
        launch, repository, pid, exited, sequences * EVENTS_PER_SEQUENCE, must_cut=False
    )

"""Drops whose sequences the process cannot name still reach the repository, by their time: a
real program whose calls the memory bound turns away, with no room for their sequences' names,
gets every sequence it stored in part marked lossy (``cmr ls``), said by ``cmr show`` with the
window, and none of the whole sequences it ran before, between and after those drops."""

from __future__ import annotations

import json
from pathlib import Path

from tests.reliability.conftest import Launcher
from tests.reliability.programs import finish
from tests.support import cmr, cmr_json, write_script

#: ``python window.py``: three whole sequences, then three times a sequence too big for the
#: memory bound (its calls past it run untraced) followed by a whole one, then three whole ones;
#: a flush after each, so each sender round holds one kind. The budget keeps no names, so every
#: drop is known by its time alone (``Batch.lost_windows``). Prints ``exited`` with its stats.
WINDOW = """
import atexit, dataclasses, json, sys

import tracer
from tracer._core import budget

def report(word):
    print(word, json.dumps(dataclasses.asdict(tracer.stats())), flush=True)

atexit.register(report, "exited")  # after the tracer's own shutdown
budget._MAX_OVERFLOW_SEQS = 0  # no name kept for a call the bound turns away

@tracer.traced(name="window.request")
def request(calls):
    for k in range(calls):
        step(k)

@tracer.traced(name="window.step")
def step(k):
    return k

def flushed():
    if not tracer.flush(60):
        sys.exit(f"not delivered: {tracer.stats()}")

request(4)
flushed()  # the sender runs: from here nothing drains the buffers before a flush
budget.on_threads_full = lambda: None
for _ in range(2):
    request(4)
flushed()
for _ in range(3):
    request(3000)  # 6,002 events, past the bound
    flushed()
    request(4)
    flushed()
for _ in range(3):
    request(4)
flushed()
"""


def test_sequences_stored_in_part_with_no_name_kept_are_lossy_by_the_window_of_the_drops(
    launch: Launcher, tmp_path: Path
) -> None:
    repository = launch.repository()
    repository.start()
    program = launch.program(
        write_script(tmp_path / "window.py", WINDOW),
        endpoint=repository.endpoint,
        INVOSEQ_MAX_BUFFERED_BYTES=str(600 * 176),  # 600 events in pure Python, 943 in C
        INVOSEQ_FLUSH_INTERVAL_MS="3600000",
        INVOSEQ_HEARTBEAT_MS="3600000",
    )
    exited = finish(program)
    assert exited["dropped_events"] > 0

    listed = cmr_json(repository.db, "ls", "--limit", "1000")
    whole = [s for s in listed if s["invocations"] == 5]
    cut = [s for s in listed if s not in whole]
    assert len(whole) == 9, listed
    assert len(cut) == 3, listed
    assert all(s["invocations"] < 3001 and s["status"] == "complete" for s in cut), cut
    assert [s["lossy"] for s in cut] == [True] * 3, cut
    assert [s["lossy"] for s in whole] == [False] * 9, whole

    shown = cmr(repository.db, "show", cut[0]["seq"]).stdout
    assert f":{program.pid} dropped events between " in shown, shown
    as_json = json.loads(cmr(repository.db, "show", cut[0]["seq"], "--json").stdout)
    assert [p["pid"] for p in as_json["dropped_by"]] == [program.pid]

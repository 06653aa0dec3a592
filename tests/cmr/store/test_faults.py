"""A repository whose store fails acknowledges nothing, so the traced program sends again: a real
traced program against a locked SQLite file ends with its batch stored exactly once."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cmr.server.server import ServerThread
from cmr.store.sqlite.store import SQLiteStore
from tests.support import read_line, traced_env, wait_for, write_script

pytestmark = pytest.mark.system

CALLS = 4

PROGRAM = """
import sys
import tracer

@tracer.traced
def step(n):
    return n

@tracer.traced
def job():
    return [step(n) for n in range(3)]

job()
print("called", flush=True)
sys.stdin.readline()
"""

FAILED = re.compile(r"cannot store batch (\d+) of process ([0-9a-f]+)")


def test_a_batch_refused_while_the_store_is_locked_is_stored_once_after_it_is_unlocked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "job.py", PROGRAM)
    store = SQLiteStore(str(path), busy_timeout_ms=50)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        with ServerThread(store, "tcp://127.0.0.1:*") as server:
            blocker.execute("BEGIN IMMEDIATE")  # another writer holds the repository
            settings = {"INVOSEQ_RESEND_MS": "200", "INVOSEQ_SPOOL_DIR": str(tmp_path / "spool")}
            program = subprocess.Popen(
                [sys.executable, str(script)],
                env=traced_env(server.endpoint, **settings),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                assert read_line(program, 60) == "called\n"
                failed = wait_for(lambda: FAILED.search(caplog.text), timeout_s=60)
                blocker.execute("ROLLBACK")  # the store works again; the tracer resends

                wait_for(lambda: [s.invocations for s in store.list_sequences(10)] == [CALLS])
                _, err = program.communicate("\n", timeout=60)
            finally:
                if program.poll() is None:
                    program.kill()
                    program.communicate(timeout=10)
        assert program.returncode == 0, err

        stats = store.stats()
        assert stats.events == 2 * CALLS  # every event once: a resent batch adds nothing
        batch_no, puid = int(failed.group(1)), int(failed.group(2), 16)
        stored = blocker.execute(
            "SELECT count(*) FROM batches WHERE puid = ? AND batch_no = ?", (puid, batch_no)
        ).fetchone()[0]
        assert stored == 1  # the batch the locked store refused, stored after all
        assert [p.dropped for p in stats.processes] == [0]
    finally:
        blocker.close()
        store.close()

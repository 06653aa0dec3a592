"""Event loops that handle signals, traced: trio and asyncio set the process's signal wakeup fd
(trio refuses to start where another library holds it), so the tracer takes none
(tracer/_signals.py), and a loop's own signal handling, SIGTERM included, is the program's.

Every program is a real process, run with RuntimeWarnings as errors (trio's "might have
collided with another library" is one), bounded by a timeout; it signals itself once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.support import run_program, write_script

pytestmark = pytest.mark.system

CALLS = 100

TRIO = """
import json, os, signal, trio
from tracer import traced
from tracer.testing import capture

@traced
def step(i):
    return i

@traced
async def main():
    for i in range(100):
        step(i)
    with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGTERM) as received:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)
        got = []
        async for signum in received:
            got.append(int(signum))
            if len(got) == 2:
                return sorted(got)

with capture() as trace:
    got = trio.run(main)
    names = sorted({i.name.rsplit(".", 1)[-1] for i in trace.invocations()})
    steps = sum(i.name.endswith(".step") for i in trace.invocations())
after = signal.set_wakeup_fd(-1)  # trio put back what it found: none
print(json.dumps({"got": got, "names": names, "steps": steps, "wakeup_fd": after}))
"""

ASYNCIO = """
import asyncio, json, os, signal
from tracer import traced
from tracer.testing import capture

@traced
def step(i):
    return i

@traced
async def main():
    for i in range(100):
        step(i)
    loop = asyncio.get_running_loop()
    got = []
    done = asyncio.Event()
    def handle(signum):
        got.append(signum)
        if len(got) == 2:
            done.set()
    for signum in (signal.SIGUSR1, signal.SIGTERM):  # installed after the tracer started
        loop.add_signal_handler(signum, handle, int(signum))
    os.kill(os.getpid(), signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGTERM)  # the program's: no flush, no death by SIGTERM
    await asyncio.wait_for(done.wait(), 60)
    return sorted(got)

with capture() as trace:
    before = signal.set_wakeup_fd(-1)  # the tracer runs: none is set
    got = asyncio.run(main())
    names = sorted({i.name.rsplit(".", 1)[-1] for i in trace.invocations()})
    steps = sum(i.name.endswith(".step") for i in trace.invocations())
print(json.dumps({"got": got, "names": names, "steps": steps, "wakeup_fd": before}))
"""


def run(tmp_path: Path, source: str) -> dict[str, object]:
    script = write_script(tmp_path / "loop.py", source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env["INVOSEQ_SPOOL_DIR"] = str(tmp_path / "spool")
    command = [sys.executable, "-W", "error::RuntimeWarning", str(script)]
    result = run_program(command, env=env, cwd=tmp_path, timeout_s=90)
    assert result.returncode == 0, result.stderr
    outcome: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return outcome


EXPECTED = {
    "got": sorted([signal.SIGUSR1, signal.SIGTERM]),
    "names": ["main", "step"],
    "steps": CALLS,
    "wakeup_fd": -1,
}


def test_a_traced_trio_program_starts_and_receives_its_signals(tmp_path: Path) -> None:
    pytest.importorskip("trio")
    assert run(tmp_path, TRIO) == EXPECTED


def test_a_traced_asyncio_program_handles_its_signals_sigterm_included(tmp_path: Path) -> None:
    assert run(tmp_path, ASYNCIO) == EXPECTED

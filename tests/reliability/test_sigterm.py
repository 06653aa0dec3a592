"""SIGTERM: a traced process stopped the ordinary way keeps what it traced and dies by SIGTERM.

Every program here is a real process. The sender's own timers (flush interval, heartbeat) are set
far beyond the test, so the calls a repository stores can only have come from the flush on SIGTERM
(`test_with_flush_on_sigterm_off_the_calls_are_lost` is the control). The programs print a line
when their calls are made; the test waits for it, and sends SIGTERM 20 ms later (the scenario).

Python runs a signal handler between two bytecodes of the main thread: a signal that comes in
the microseconds before the main thread blocks in a system call is handled only when the call
returns, and a test that signals right after reading a line lands in that window often enough to
matter. The tracer's watchdog does not depend on the main thread
(`test_a_sigterm_just_before_the_main_thread_blocks_is_not_missed`), but a program's own handler
and Ctrl-C do: so, while they wait for a signal, the programs return to Python every 0.1 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.reliability.conftest import Launcher
from tests.reliability.harness import PATIENCE_S, stored_by_pid
from tests.support import wait_for, write_script
from tracer._signals import SPOOL_GRACE_S

pytestmark = pytest.mark.system

#: Only the flush on SIGTERM sends: the sender's periodic flush and heartbeat never come.
QUIET = {"INVOSEQ_FLUSH_INTERVAL_MS": "600000", "INVOSEQ_HEARTBEAT_MS": "600000"}
CALLS = 200
SIGTERM_AFTER_S = 0.02  # the scenario: the signal comes 20 ms after the last traced call

WORKER = """
import json, os, select, signal, sys, threading
import tracer

@tracer.traced
def work(i):
    return i

def idle():  # until the test writes a line, back in Python every 0.1 s (see the docstring)
    while not select.select([sys.stdin], [], [], 0.1)[0]:
        pass
    sys.stdin.readline()

def calls():
    for i in range(200):
        work(i)

if sys.argv[1:] == ["thread"]:  # the tracer starts from another thread's first traced call
    thread = threading.Thread(target=calls)
    thread.start()
    thread.join()
else:
    calls()
print("DONE", json.dumps({"pid": os.getpid()}), flush=True)
idle()  # SIGTERM comes while the program waits here
print("EOF {}", flush=True)
"""


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its ``SigCgt`` mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    raise AssertionError(f"no SigCgt in /proc/{pid}/status")


def term_after_done(
    launch: Launcher, script: Path, *args: str, endpoint: str, **settings: str
) -> int:
    """Run ``script``, wait for its DONE line, SIGTERM it 20 ms later: its pid."""
    program = launch.program(script, *args, endpoint=endpoint, **settings)
    pid: int = program.expect("DONE")["pid"]
    time.sleep(SIGTERM_AFTER_S)
    os.kill(pid, signal.SIGTERM)
    assert program.wait() == -signal.SIGTERM, program.stderr()
    return pid


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_worker_terminated_20ms_after_its_last_call_stores_every_call_and_dies_by_sigterm(
    launch: Launcher, tmp_path: Path, where: str
) -> None:
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "worker.py", WORKER)
    pid = term_after_done(launch, script, where, endpoint=repository.endpoint, **QUIET)
    assert stored_by_pid(repository.db)[pid] == (CALLS, CALLS)


BLOCKING = """
import json, os, sys
import tracer

@tracer.traced
def work(i):
    return i

for i in range(200):
    work(i)
print("DONE", json.dumps({"pid": os.getpid()}), flush=True)
sys.stdin.readline()  # blocks in read(2): no return to Python until a line comes
"""


def test_a_sigterm_just_before_the_main_thread_blocks_is_not_missed(
    launch: Launcher, tmp_path: Path
) -> None:
    """SIGTERM the moment the program prints: it often lands just before the main thread blocks
    in read(2), where a Python-level handler alone would wait for the read, for ever. Ten rounds,
    each stored whole and ended by SIGTERM."""
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "blocking.py", BLOCKING)
    pids = []
    for _ in range(10):
        program = launch.program(script, endpoint=repository.endpoint, **QUIET)
        pid = program.expect("DONE")["pid"]
        os.kill(pid, signal.SIGTERM)
        assert program.wait() == -signal.SIGTERM, program.stderr()
        pids.append(pid)
    stored = stored_by_pid(repository.db)
    assert [stored.get(pid) for pid in pids] == [(CALLS, CALLS)] * len(pids)


TRIO = """
import json, os, trio
import tracer

@tracer.traced
def work(i):
    return i

async def main():
    for i in range(200):
        work(i)
    print("DONE", json.dumps({"pid": os.getpid()}), flush=True)
    await trio.sleep_forever()  # SIGTERM comes while trio waits in epoll

tracer.configure()  # the tracer starts before trio does, as a service's start-up would
trio.run(main)
"""


def test_a_trio_program_starts_and_is_flushed_on_sigterm(launch: Launcher, tmp_path: Path) -> None:
    """trio refuses to start where the signal wakeup fd is taken (a RuntimeWarning, an error
    here): the tracer takes none, and SIGTERM still flushes and ends the program."""
    pytest.importorskip("trio")
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "trio_worker.py", TRIO)
    warnings = {"PYTHONWARNINGS": "error::RuntimeWarning"}
    pid = term_after_done(launch, script, endpoint=repository.endpoint, **QUIET, **warnings)
    assert stored_by_pid(repository.db)[pid] == (CALLS, CALLS)


def test_with_flush_on_sigterm_off_the_calls_are_lost(launch: Launcher, tmp_path: Path) -> None:
    """The control: without the flush, the same worker stores nothing (and no handler is there)."""
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "worker.py", WORKER)
    program = launch.program(
        script,
        "main",
        endpoint=repository.endpoint,
        INVOSEQ_FLUSH_ON_SIGTERM="0",
        **QUIET,
    )
    pid = program.expect("DONE")["pid"]
    assert not catches_sigterm(pid)
    os.kill(pid, signal.SIGTERM)
    assert program.wait() == -signal.SIGTERM
    assert stored_by_pid(repository.db).get(pid, (0, 0)) == (0, 0)


PROCESS = """
import json, multiprocessing as mp, os, sys, time
import tracer

@tracer.traced
def work(i):
    return i

def child(conn):
    for i in range(200):
        work(i)
    conn.send(os.getpid())
    while not conn.poll(0.1):  # SIGTERM comes while the child waits here
        pass

if __name__ == "__main__":
    tracer.configure()  # the parent's handler: a forked child inherits it
    context = mp.get_context(sys.argv[1])
    ours, theirs = context.Pipe()
    process = context.Process(target=child, args=(theirs,))
    process.start()
    pid = ours.recv()
    time.sleep(0.02)
    process.terminate()
    process.join(60)
    print("EXIT", json.dumps({"pid": pid, "exitcode": process.exitcode}), flush=True)
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_multiprocessing_process_terminated_stores_every_call(
    launch: Launcher, tmp_path: Path, method: str
) -> None:
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "process.py", PROCESS)
    program = launch.program(script, method, endpoint=repository.endpoint, **QUIET)
    child = program.expect("EXIT")
    assert child["exitcode"] == -signal.SIGTERM
    assert program.wait() == 0, program.stderr()
    assert stored_by_pid(repository.db)[child["pid"]] == (CALLS, CALLS)


POOL = """
import json, multiprocessing as mp, os, time
import tracer

READ, WRITE = os.pipe()  # inherited by the forked worker

@tracer.traced
def work(i):
    return i

def task(n):
    for i in range(n):
        work(i)
    os.write(WRITE, b"%d\\n" % os.getpid())
    while True:  # still busy when the pool is terminated
        time.sleep(0.1)

if __name__ == "__main__":
    tracer.configure()
    pool = mp.get_context("fork").Pool(1)
    workers = list(pool._pool)
    pool.apply_async(task, (200,))
    pid = int(os.read(READ, 64))
    time.sleep(0.02)
    pool.terminate()  # SIGTERM to the busy worker, as leaving `with Pool(...)` does
    exitcodes = [worker.exitcode for worker in workers]
    print("EXIT", json.dumps({"pid": pid, "exitcodes": exitcodes}), flush=True)
"""


def test_a_pool_worker_terminated_by_pool_terminate_stores_every_call(
    launch: Launcher, tmp_path: Path
) -> None:
    """Not instrumented (no flush at the end of each task): the worker, busy in a task, is
    terminated; only the flush on SIGTERM sends the calls the task made."""
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "pool.py", POOL)
    program = launch.program(script, endpoint=repository.endpoint, **QUIET)
    worker = program.expect("EXIT")
    assert worker["exitcodes"] == [-signal.SIGTERM]
    assert program.wait() == 0, program.stderr()
    assert stored_by_pid(repository.db)[worker["pid"]] == (CALLS, CALLS)


OWN_HANDLER = """
import json, os, select, signal, sys
import tracer

@tracer.traced
def work(i):
    return i

def mine(signum, frame):
    # os.write: the signal may come while print("READY") still holds stdout's buffer
    os.write(1, ("MINE " + json.dumps({"flushed": tracer.flush()}) + "\\n").encode())
    os._exit(7)

if sys.argv[1] == "before":
    signal.signal(signal.SIGTERM, mine)
for i in range(200):
    work(i)  # the tracer starts at the first call
if sys.argv[1] == "after":
    signal.signal(signal.SIGTERM, mine)
print("READY", json.dumps({"pid": os.getpid(), "mine": signal.getsignal(signal.SIGTERM) is mine}),
      flush=True)
while not select.select([sys.stdin], [], [], 0.1)[0]:  # back in Python every 0.1 s
    pass
"""


@pytest.mark.parametrize("installed", ["before", "after"])
def test_a_program_with_its_own_sigterm_handler_keeps_it_and_flushes_itself(
    launch: Launcher, tmp_path: Path, installed: str
) -> None:
    """Installed before the tracer starts, it is kept; after, it replaces ours. Either way it runs,
    its exit status is its own, and its `tracer.flush()` stores every call."""
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "own.py", OWN_HANDLER)
    program = launch.program(script, installed, endpoint=repository.endpoint, **QUIET)
    ready = program.expect("READY")
    assert ready["mine"] is True
    os.kill(ready["pid"], signal.SIGTERM)
    assert program.expect("MINE") == {"flushed": True}
    assert program.wait() == 7
    assert stored_by_pid(repository.db)[ready["pid"]] == (CALLS, CALLS)


RESTORES_AND_RAISES = """
import json, os, select, signal, sys
import tracer

@tracer.traced
def work(i):
    return i

stopping = []

def mine(signum, frame):
    stopping.append(signum)

previous = signal.signal(signal.SIGTERM, mine)  # before the tracer starts, as a server's own
for i in range(100):
    work(i)  # the tracer starts at the first call
print("READY", json.dumps({"pid": os.getpid()}), flush=True)
while not stopping:  # back in Python every 0.1 s
    select.select([sys.stdin], [], [], 0.1)
for i in range(100, 200):
    work(i)  # the server's own shutdown
signal.signal(signal.SIGTERM, previous)  # the default back, then die by SIGTERM
signal.raise_signal(signal.SIGTERM)
print("ALIVE", "{}", flush=True)
"""


def test_a_program_that_puts_the_default_back_and_raises_sigterm_stores_every_call(
    launch: Launcher, tmp_path: Path
) -> None:
    """uvicorn's workers: a handler of their own while they stop, then the default back and
    SIGTERM raised again. Every call is stored (before, none was: the process died at the
    raise, its events unsent) and the process dies by SIGTERM, as untraced."""
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "restores.py", RESTORES_AND_RAISES)
    program = launch.program(script, endpoint=repository.endpoint, **QUIET)
    pid = program.expect("READY")["pid"]
    os.kill(pid, signal.SIGTERM)
    assert program.wait() == -signal.SIGTERM, program.stderr()
    assert stored_by_pid(repository.db)[pid] == (CALLS, CALLS)


@pytest.mark.timing
def test_a_second_sigterm_during_the_flush_kills_at_once(launch: Launcher, tmp_path: Path) -> None:
    """The repository is unreachable and the flush would wait 60 s: once the handler has put
    SIGTERM back at its default (the process no longer catches it) and is still flushing, a
    second SIGTERM ends the process, well before the flush timeout."""
    down = launch.repository()  # never started: nothing listens on its endpoint
    script = write_script(tmp_path / "worker.py", WORKER)
    settings = {**QUIET, "INVOSEQ_FLUSH_TIMEOUT_MS": "60000"}
    program = launch.program(script, "main", endpoint=down.endpoint, **settings)
    pid = program.expect("DONE")["pid"]
    assert catches_sigterm(pid)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not catches_sigterm(pid))  # the handler runs: SIGTERM at its default again
    assert program.process.poll() is None  # ... and it is flushing
    os.kill(pid, signal.SIGTERM)
    assert program.wait(20) == -signal.SIGTERM


@pytest.mark.timing
def test_with_the_repository_down_sigterm_ends_the_process_within_the_flush_timeout(
    launch: Launcher, tmp_path: Path
) -> None:
    """It dies by SIGTERM once the flush timeout has passed, its calls left in the spool; the next
    run of the same program sends them."""
    repository = launch.repository()
    script = write_script(tmp_path / "worker.py", WORKER)
    timeout_s = 2.0
    settings = {**QUIET, "INVOSEQ_FLUSH_TIMEOUT_MS": str(int(timeout_s * 1000))}
    program = launch.program(script, "main", endpoint=repository.endpoint, **settings)
    first = program.expect("DONE")["pid"]
    time.sleep(SIGTERM_AFTER_S)
    signalled = time.monotonic()
    os.kill(first, signal.SIGTERM)
    assert program.wait() == -signal.SIGTERM, program.stderr()
    # A generous bound for a loaded machine: the handler itself gives up after the timeout + grace.
    assert time.monotonic() - signalled < timeout_s + SPOOL_GRACE_S + 10
    assert list(launch.spool_dir.iterdir()), "the unacknowledged calls were not spooled"

    repository.start()
    again = launch.program(script, "main", endpoint=repository.endpoint)
    second = again.expect("DONE")["pid"]
    again.say("")
    again.expect("EOF")
    assert again.wait() == 0, again.stderr()
    stored = stored_by_pid(repository.db)
    assert (stored[first], stored[second]) == ((CALLS, CALLS), (CALLS, CALLS))


def test_sigint_is_unaffected(launch: Launcher, tmp_path: Path) -> None:
    """With the SIGTERM handler in place, Ctrl-C is still a KeyboardInterrupt: the program's
    traceback, its exit by SIGINT, and the flush at exit."""
    repository = launch.repository()
    repository.start()
    script = write_script(tmp_path / "worker.py", WORKER)
    program = launch.program(script, "main", endpoint=repository.endpoint, **QUIET)
    pid = program.expect("DONE")["pid"]
    assert catches_sigterm(pid)
    os.kill(pid, signal.SIGINT)
    assert program.wait() == -signal.SIGINT
    assert "KeyboardInterrupt" in program.stderr()
    assert stored_by_pid(repository.db)[pid] == (CALLS, CALLS)


PID_ONE = """
import json, os, signal
import tracer

@tracer.traced
def work(i):
    return i

work(1)
default = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
print(json.dumps({"pid": os.getpid(), "default": default}))
"""


def test_as_pid_1_sigterm_is_left_at_its_default(tmp_path: Path) -> None:
    """A container's init ignores a signal at its default, so the tracer installs nothing there."""
    unshare = shutil.which("unshare")
    command = [unshare or "unshare", "--user", "--map-root-user", "--pid", "--fork"]
    if unshare is None or subprocess.run([*command, "true"], check=False).returncode != 0:
        pytest.skip("no user and PID namespaces here (unshare)")
    script = tmp_path / "pid1.py"
    script.write_text(textwrap.dedent(PID_ONE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_ENDPOINT="tcp://127.0.0.1:1", INVOSEQ_FLUSH_TIMEOUT_MS="0")
    env["INVOSEQ_SPOOL_DIR"] = str(tmp_path / "spool")
    result = subprocess.run(
        [*command, sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '{"pid": 1, "default": true}'

"""``tracer run`` starts and stops processes as ``python`` would: a child the program forks never
runs the parent's cleanup (the embedded repository's stop, the report), gunicorn's workers under
the embedded repository stop by themselves with every request stored, a program that dies by a
signal dies by the same signal, with the same output, and a spawn child ended by SIGTERM right
after answering keeps what it traced.

Each test runs ``python -m tracer run`` on a program in tmp_path (its embedded repository storing
into tmp_path), most beside the same program under plain ``python``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from benchmarks.lifecycle import SPAWN_SERVER
from tests.processes.web_support import nodes
from tests.support import cmr_json, free_port, own_session, read_line, wait_for, write_script

pytestmark = pytest.mark.system

PATIENCE_S = 60.0
REPORTED = " in this run"  # the report's first line, printed by the parent alone


def environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    if "INVOSEQ_PURE" in os.environ:  # the hot path under test stays the one asked for
        env["INVOSEQ_PURE"] = os.environ["INVOSEQ_PURE"]
    env.update(
        INVOSEQ_DB=str(tmp_path / "cmr.sqlite"),
        INVOSEQ_SPOOL_DIR=str(tmp_path / "spool"),
        NO_COLOR="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def command(*args: str, traced: bool) -> list[str]:
    return [sys.executable, "-m", "tracer", "run", *args] if traced else [sys.executable, *args]


@contextmanager
def started(
    tmp_path: Path, args: list[str], *, traced: bool, output: IO[str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """The program in a session of its own, stdout and stderr piped (or both to ``output``);
    it and whatever it started are killed afterwards."""
    with own_session(
        command(*args, traced=traced),
        timeout_s=PATIENCE_S,
        cwd=tmp_path,
        env=environment(tmp_path),
        stdin=subprocess.PIPE,
        stdout=output or subprocess.PIPE,
        stderr=output or subprocess.PIPE,
    ) as process:
        yield process


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=PATIENCE_S)
    return process.returncode, stdout, stderr


def stored(tmp_path: Path) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = cmr_json(tmp_path / "cmr.sqlite", "ls", "--limit", "1000")
    return listed


# -- a child the program forks ------------------------------------------------------------------

FORKS = """
import atexit, os, select, sys

def work(who):
    return who

def wait_for_child(pid):
    # Bounded: a child stuck in its parent's cleanup is reported, not waited for for ever.
    fd = os.pidfd_open(pid)
    if not select.select([fd], [], [], 60)[0]:
        os.kill(pid, 9)
        print("child hung", flush=True)
    os.close(fd)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

def main():
    work("parent")
    pid = os.fork()
    if pid == 0:
        atexit.register(print, "child atexit", flush=True)
        work("child")
        sys.exit(3)  # to the top of the stack, as gunicorn's workers leave
    print("child exit status", wait_for_child(pid), flush=True)

atexit.register(print, "parent atexit", flush=True)
main()
"""


PARENT_OUT = "child exit status 3\nparent atexit\n"


def test_a_forked_child_returning_to_the_top_ends_as_under_python(tmp_path: Path) -> None:
    """The child runs its atexit handlers and exits 3; the embedded repository it inherited a
    copy of is left to the parent (who stores both processes' calls), the report printed once."""
    write_script(tmp_path / "forks.py", FORKS)
    outcomes = []
    for traced in (False, True):
        with started(tmp_path, ["forks.py"], traced=traced) as process:
            outcomes.append(finish(process))
    (plain_code, plain_out, _), (code, out, err) = outcomes
    # The child runs the atexit handlers it inherited too, as any forked child does.
    assert (plain_code, plain_out) == (0, "child atexit\nparent atexit\n" + PARENT_OUT)
    assert (code, out) == (plain_code, plain_out), err
    assert err.count(REPORTED) == 1, err
    [summary] = stored(tmp_path)  # the child continues the sequence it was forked in
    assert summary["root"] == "__main__.main"
    assert (summary["processes"], summary["invocations"]) == (2, 4)


# -- gunicorn under tracer run, with the embedded repository --------------------------------------

WSGI_APP = """
import os

def work(path):
    return f"{os.getpid()} {path}"

def app(environ, start_response):
    body = work(environ["PATH_INFO"]).encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
"""


def get(port: int, path: str) -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE_S)
    try:
        connection.request("GET", path, headers={"Connection": "close"})
        response = connection.getresponse()
        assert response.status == 200
        return response.read()
    finally:
        connection.close()


@contextmanager
def gunicorn(tmp_path: Path, *options: str) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    """``tracer run --include app -m gunicorn -w 2 OPTIONS app:app`` with the embedded
    repository, its output in a log file, once both workers have booted; the stop is the test's."""
    write_script(tmp_path / "app.py", WSGI_APP)
    write_script(tmp_path / "ready.conf.py", READY_HOOK)
    port = free_port()
    args = ["--include", "app", "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}"]
    args += ["-c", "ready.conf.py", "--no-control-socket", *options, "app:app"]
    log = tmp_path / "gunicorn.log"
    with log.open("w") as output, started(tmp_path, args, traced=True, output=output) as master:

        def booted() -> bool:
            assert master.poll() is None, log.read_text()
            return log.read_text().count(READY) == 2

        wait_for(booted, timeout_s=PATIENCE_S, interval_s=0.05)
        yield master, port, log


#: A gunicorn configuration whose workers say when they are ready: their signal handlers
#: installed, the application loaded.
READY_HOOK = """
def post_worker_init(worker):
    worker.log.info("Worker ready (pid: %s)", worker.pid)
"""
READY = "Worker ready"


def stop_gunicorn(master: subprocess.Popen[str], log: Path) -> tuple[float, int, str]:
    """SIGTERM to the master once every worker it started is ready (a worker recycled after its
    last request is replaced: a SIGTERM the replacement got before its own handlers were in
    place would be gunicorn's race, not the tracer's); the seconds until it exited, its status
    and its log."""

    def settled() -> bool:
        text = log.read_text()
        return text.count(READY) == 2 + text.count("Autorestarting worker")

    wait_for(settled, timeout_s=PATIENCE_S, interval_s=0.05)
    began = time.monotonic()
    master.send_signal(signal.SIGTERM)
    master.wait(PATIENCE_S)
    return time.monotonic() - began, master.returncode, log.read_text()


@pytest.mark.parametrize("options", [(), ("--max-requests", "2")], ids=["plain", "max-requests"])
def test_gunicorn_workers_end_by_themselves_and_every_request_is_stored(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    """No worker is killed (gunicorn logs a SIGKILL it sends), however often recycled; the master
    exits 0 and the parent alone reports. Gunicorn would kill a worker that hangs at exit only
    after --graceful-timeout: set beyond the test's patience, such a hang fails the test."""
    graceful = ("--graceful-timeout", str(int(PATIENCE_S * 2)))
    with gunicorn(tmp_path, *graceful, *options) as (master, port, log_file):
        bodies = [get(port, f"/r{n}") for n in range(6)]
        _, code, log = stop_gunicorn(master, log_file)
    assert code == 0, log
    assert "SIGKILL" not in log, log
    assert "exited with code" not in log, log
    assert log.count(REPORTED) == 1, log
    assert [body.split()[1] for body in bodies] == [f"/r{n}".encode() for n in range(6)]
    assert len(stored(tmp_path)) == 6
    if options:  # each worker served two requests at most: recycled, with every call stored
        assert len({body.split()[0] for body in bodies}) >= 3


@pytest.mark.timing
@pytest.mark.parametrize("options", [(), ("--max-requests", "2")], ids=["plain", "max-requests"])
def test_gunicorn_stops_within_5_s_of_sigterm_and_no_request_waits(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    """Before, each worker ran the parent's cleanup until gunicorn killed it (30 s), and a
    recycled worker's successor waited as long to be started."""
    with gunicorn(tmp_path, *options) as (master, port, log_file):
        slowest = 0.0
        for n in range(6):
            began = time.monotonic()
            get(port, f"/r{n}")
            slowest = max(slowest, time.monotonic() - began)
        elapsed, code, log = stop_gunicorn(master, log_file)
    assert code == 0, log
    assert elapsed < 5.0, log
    assert slowest < 5.0
    assert len(stored(tmp_path)) == 6


# -- exit statuses ------------------------------------------------------------------------------

WAITS = """
import atexit, select, signal, sys

atexit.register(print, "atexit", flush=True)

def stop(signum, frame):
    print("handled", signal.getsignal(signal.SIGTERM) is stop, flush=True)
    sys.exit(5)

def work():
    return 1

def wait():
    print("ready", flush=True)
    while not select.select([sys.stdin], [], [], 0.1)[0]:  # back in Python every 0.1 s
        pass

def main():
    work()
    if sys.argv[1:] == ["own"]:
        signal.signal(signal.SIGTERM, stop)
    wait()

main()
"""


def traceback_frames(stderr: str) -> list[str]:
    """The ``File ..., in NAME`` lines of the first traceback in ``stderr``."""
    head = stderr.split("\ntracer: ", 1)[0].split("\n\n", 1)[0].strip().splitlines()
    return [line.split(", line")[0] + line.rpartition(",")[2] for line in head if "File" in line]


@pytest.mark.parametrize(
    ("signum", "args", "expected"),
    [
        (signal.SIGINT, [], (-signal.SIGINT, "ready\natexit\n")),
        (signal.SIGTERM, [], (-signal.SIGTERM, "ready\n")),
        (signal.SIGTERM, ["own"], (5, "ready\nhandled True\natexit\n")),
    ],
    ids=["sigint", "sigterm", "sigterm-own-handler"],
)
def test_a_signal_ends_the_program_as_under_python(
    tmp_path: Path, signum: signal.Signals, args: list[str], expected: tuple[int, str]
) -> None:
    """Ctrl-C: the traceback, atexit, then death by SIGINT (a shell sees the Ctrl-C). SIGTERM at
    its default: death by SIGTERM, nothing of the program run, what it traced kept. A handler
    of the program's own stays its own and decides.

    The signal alone ends the program: its stdin stays open until it has exited. Closed at once,
    its ``select`` could return on the end of the input first, when the signal had landed after
    the last point where Python runs handlers and before the call blocked (a CPython race, more
    likely beside the tracer's threads, which take the GIL there): the handler then ran in the
    ``atexit`` callback (a CI run on 3.12 saw it once)."""
    write_script(tmp_path / "waits.py", WAITS)
    outcomes = []
    for traced in (False, True):
        with started(tmp_path, ["waits.py", *args], traced=traced) as process:
            assert read_line(process, PATIENCE_S) == "ready\n"
            process.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):  # a hang: finish() says so
                process.wait(PATIENCE_S)
            code, out, err = finish(process)
            outcomes.append((code, "ready\n" + out, err))
    (plain_code, plain_out, plain_err), (code, out, err) = outcomes
    assert (plain_code, plain_out) == expected
    assert (code, out) == expected, err
    assert traceback_frames(err) == traceback_frames(plain_err)
    if signum == signal.SIGINT:
        assert "KeyboardInterrupt" in err
        assert err.count(REPORTED) == 1
    [summary] = stored(tmp_path)
    assert summary["root"] == "__main__.main"


#: Programs and python's exit status for them: a subclass of KeyboardInterrupt is no Ctrl-C.
ENDINGS = {
    "raise KeyboardInterrupt": -signal.SIGINT,
    "class Stop(KeyboardInterrupt): pass\nraise Stop": 1,
    "import sys\nsys.exit(-2)": 254,
}
JOIN_INTERRUPTED = """
import os, signal, sys, threading, time

def interrupt_the_join():
    main = threading.main_thread().ident
    deadline = time.monotonic() + 60
    while sys._current_frames()[main].f_code.co_name != "_shutdown":
        assert time.monotonic() < deadline, "the main thread never joined"
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt_the_join).start()
"""


@pytest.mark.parametrize("source", [*ENDINGS, JOIN_INTERRUPTED], ids=["ki", "sub", "exit", "join"])
def test_the_exit_status_is_pythons(tmp_path: Path, source: str) -> None:
    """A KeyboardInterrupt reaching the top dies by SIGINT (not a subclass of it); Ctrl-C while
    the interpreter waits for the threads at exit is reported and ignored."""
    write_script(tmp_path / "ends.py", source)
    outcomes = []
    for traced in (False, True):
        with started(tmp_path, ["ends.py"], traced=traced) as process:
            outcomes.append(finish(process))
    (plain_code, _, plain_err), (code, _, err) = outcomes
    program_err = err.split("\ntracer: ")[0]
    assert code == plain_code, err
    if source in ENDINGS:
        assert plain_code == ENDINGS[source]
        assert program_err.strip() == plain_err.strip()
    else:
        assert plain_code == 0
        # Python reports it as ignored, or with a traceback when it lands in threading._shutdown
        # before the join (3.13): which one is a race, in each run alike
        for report in (plain_err, program_err):
            assert report.startswith(("Exception ignored ", "Traceback ")), report
            assert "KeyboardInterrupt" in report


# -- a spawn child serving HTTP, ended by terminate() right after answering ------------------------


def test_a_spawn_child_serving_http_terminated_after_answering_keeps_its_call(
    tmp_path: Path,
) -> None:
    """Three children in a row, each ended by SIGTERM right after its answer: each one's call
    is stored, and each process ended (its final batch came), none lost."""
    write_script(tmp_path / "spawnserver.py", SPAWN_SERVER)
    with started(tmp_path, ["--no-report", "spawnserver.py", "3"], traced=True) as process:
        code, out, err = finish(process)
    assert code == 0, err
    children = json.loads(out)
    states = {p["pid"]: p["state"] for p in cmr_json(tmp_path / "cmr.sqlite", "stats")["processes"]}
    assert [states.get(pid) for pid in children] == ["ended"] * 3
    answered = {
        node["process"]["pid"]
        for summary in stored(tmp_path)
        for node in nodes(cmr_json(tmp_path / "cmr.sqlite", "show", summary["seq"])["root"])
        if node["name"] == "__main__.answer"
    }
    assert answered == set(children)

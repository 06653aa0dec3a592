"""Case ``idle`` (issue 33): what an idle traced process costs, against the same process bare.

Three programs, each run bare and under ``python -m tracer run`` (its embedded repository
listening): a script that makes a few traced calls, then waits (``threading.Event().wait``), a
gunicorn master with two sync workers, and uvicorn serving an ASGI app (its event loop, its
lifespan a service invocation open all along), each server having served a few requests, then
none. After the calls and a settling pause, each process tree's CPU time is read over a fixed
window from ``/proc/PID/task/TID/schedstat`` (nanoseconds, every thread, the workers included),
the embedded repository's apart. The value is CPU % of one core; for uvicorn, which wakes every
second itself (0.1-0.2 % bare), the part the tracer adds; for gunicorn, three processes whose
master wakes every second (0.01-0.03 % bare), the whole tree and, held to the target of an idle
traced process, the part the tracer adds per process.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Final

from benchmarks.harness import CaseResult, Row, Settings, Target
from benchmarks.processes import (
    clean_environment,
    cpu_ns,
    free_port,
    process_tree,
    stop,
)

NAME: Final = "idle"
#: Issue 33: an idle traced process costs at most 0.05 % of a core.
TARGETS: Final = (Target("first", "<=", 0.05),)
#: A gunicorn master and its two sync workers.
GUNICORN_PROCESSES: Final = 3

SCRIPT: Final = """\
import sys, threading

def work(n):
    return sum(step(i) for i in range(n))

def step(i):
    return i * 2

for _ in range(5):
    work(100)
print("READY", flush=True)
threading.Event().wait(float(sys.argv[1]))
"""

APP: Final = """\
def handle(path):
    return ("hello " + path).encode()

def app(environ, start_response):
    body = handle(environ["PATH_INFO"])
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [body]
"""

ASGI_APP: Final = """\
async def handle(path):
    return ("hello " + path).encode()

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = await handle(scope["path"])
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})
"""


def run(settings: Settings) -> CaseResult:
    window = 6.0 if settings.quick else 20.0
    settle = 2.0 if settings.quick else 3.0
    workdir = settings.workdir
    (workdir / "idleprog.py").write_text(SCRIPT)
    (workdir / "idleapp.py").write_text(APP)
    (workdir / "idleasgi.py").write_text(ASGI_APP)
    env = clean_environment(INVOSEQ_SPOOL_DIR=str(workdir / "spool"))
    result = CaseResult()
    measured: dict[str, tuple[float, float]] = {}
    for traced in (False, True):
        measured[f"script {traced}"] = _script(workdir, env, traced, window, settle)
        gunicorn = ["-m", "gunicorn", "-w", "2", "idleapp:app"]
        measured[f"gunicorn {traced}"] = _server(
            workdir, env, traced, window, settle, server=gunicorn
        )
        uvicorn = ["-m", "uvicorn", "idleasgi:app"]
        measured[f"uvicorn {traced}"] = _server(
            workdir, env, traced, window, settle, server=uvicorn
        )
    result.raw = {name: list(value) for name, value in measured.items()}
    for kind, label in (
        ("script", "idle traced process (a few calls, then a wait)"),
        ("gunicorn", "gunicorn master + 2 idle sync workers"),
    ):
        bare, _ = measured[f"{kind} False"]
        traced_pct, repository = measured[f"{kind} True"]
        result.rows.append(
            Row(
                case=NAME,
                name=f"{label} under tracer run: CPU % of a core",
                value=traced_pct,
                unit="%",
                baseline=bare,
                baseline_name="the same, bare",
                # The target is an idle traced process's: gunicorn's row is three processes
                # with timers of their own (the row below holds it to the target).
                targets=TARGETS if kind == "script" else (),
                note=f"over {window:.0f} s; the embedded repository beside it: {repository:.3f} %",
            )
        )
    for kind, name, processes in (
        ("gunicorn", "gunicorn's idle processes under tracer run", GUNICORN_PROCESSES),
        ("uvicorn", "uvicorn serving an idle ASGI app, under tracer run", 1),
    ):
        bare, _ = measured[f"{kind} False"]
        traced_pct, repository = measured[f"{kind} True"]
        per_process = f", per process ({processes} processes)" if processes > 1 else ""
        result.rows.append(
            Row(
                case=NAME,
                name=f"{name}: CPU % of a core added{per_process}",
                value=(traced_pct - bare) / processes,
                unit="%",
                targets=TARGETS,
                note=(
                    f"over {window:.0f} s: {traced_pct:.3f} % traced, {bare:.3f} % bare; the"
                    f" embedded repository beside it: {repository:.3f} %"
                ),
            )
        )
    return result


def _script(
    workdir: Path, env: dict[str, str], traced: bool, window: float, settle: float
) -> tuple[float, float]:
    args = ["idleprog.py", str(window + settle + 30)]
    command = [sys.executable, *(_tracer_run(workdir) if traced else []), *args]
    process = subprocess.Popen(command, cwd=workdir, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "READY":
            raise RuntimeError("the idle script did not start")
        return _measure(process.pid, window, settle)
    finally:
        stop(process)


def _server(
    workdir: Path,
    env: dict[str, str],
    traced: bool,
    window: float,
    settle: float,
    *,
    server: list[str],
) -> tuple[float, float]:
    """``server`` (``-m gunicorn ... idleapp:app``) on a free port: ten requests, then idle."""
    port = free_port()
    module = server[-1].partition(":")[0]
    bind = ["-b", f"127.0.0.1:{port}"] if "gunicorn" in server else ["--port", str(port)]
    prefix = [*_tracer_run(workdir), "--include", module] if traced else []
    command = [sys.executable, *prefix, *server[:-1], *bind, server[-1]]
    process = subprocess.Popen(
        command, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        served = 0
        while served < 10:  # gunicorn's both workers serve some (round robin is not promised)
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{server[1]} did not serve")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=5) as reply:
                    reply.read()
                served += 1
            except OSError:
                time.sleep(0.1)
        return _measure(process.pid, window, settle)
    finally:
        stop(process)


def _tracer_run(workdir: Path) -> list[str]:
    return ["-m", "tracer", "run", "--no-report", "--db", str(workdir / "cmr.sqlite")]


def _measure(pid: int, window: float, settle: float) -> tuple[float, float]:
    """CPU % of a core of the process tree under ``pid`` over ``window`` seconds, after
    ``settle``; the embedded repository's (``cmr serve``) apart."""
    time.sleep(settle)
    program, repository = process_tree(pid)
    before = cpu_ns(program), cpu_ns(repository)
    time.sleep(window)
    after = cpu_ns(program), cpu_ns(repository)
    return (
        100 * (after[0] - before[0]) / 1e9 / window,
        100 * (after[1] - before[1]) / 1e9 / window,
    )

"""``tracer run`` in the Python processes the program starts: spawn and forkserver pools,
``ProcessPoolExecutor``, ``uvicorn --workers`` and ``subprocess`` children trace the modules the
include patterns name, send to the run's repository and join the parent's sequences.

Each test runs ``python -m tracer run`` on a program written to tmp_path, its repository storing
into tmp_path, and reads the trees back with ``cmr show --json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    cmr_json,
    free_port,
    http_get,
    run_python,
    shape,
    wait_for,
    write_script,
)
from tracer.run import bootstrap

pytestmark = pytest.mark.system

WORK = """
def job(n):
    return inner(n)

def inner(n):
    return n * n

if __name__ == "__main__":
    import sys
    print("work", job(int(sys.argv[1])))
"""

MAIN = """
import concurrent.futures
import multiprocessing
import sys

import work

def task(n):
    return helper(work.job(n))

def helper(value):
    return value

def main(kind, method):
    context = multiprocessing.get_context(method)
    if kind == "pool":
        with context.Pool(2) as pool:
            print(pool.map(work.job, range(3)), pool.map(task, range(2)))
    else:
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
            tasks = [pool.submit(task, n) for n in range(2)]
            print(list(pool.map(work.job, range(3))), [future.result() for future in tasks])

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
"""

INNER = {"name": "work.inner", "status": "ok"}
JOB = {"name": "work.job", "status": "ok", "children": [INNER]}
HELPER = {"name": "__main__.helper", "status": "ok"}
TASK = {"name": "__main__.task", "status": "ok", "children": [JOB, HELPER]}
MAIN_INNER = {"name": "__main__.inner", "status": "ok"}


def tracer_run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    result = run_python(tmp_path, "-m", "tracer", "run", "--no-report", *args, **env)
    assert result.returncode == 0, result.stderr
    return result


def sequences(tmp_path: Path) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = cmr_json(tmp_path / "cmr.sqlite", "ls", "--limit", "100")
    return listed


def tree(tmp_path: Path, seq: str) -> dict[str, Any]:
    shown: dict[str, Any] = cmr_json(tmp_path / "cmr.sqlite", "show", seq)["root"]
    return shown


def recorded_pids(tmp_path: Path) -> set[int]:
    """Every process the repository heard from, events or not."""
    stats = cmr_json(tmp_path / "cmr.sqlite", "stats")
    return {process["pid"] for process in stats["processes"]}


def in_order(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(nodes, key=lambda node: json.dumps(node, sort_keys=True))


@pytest.mark.parametrize(
    ("kind", "method"), [("pool", "spawn"), ("pool", "forkserver"), ("executor", "spawn")]
)
def test_spawned_and_forkserver_workers_trace_the_included_modules(
    tmp_path: Path, kind: str, method: str
) -> None:
    write_script(tmp_path / "work.py", WORK)
    write_script(tmp_path / "main.py", MAIN)
    result = tracer_run(tmp_path, "--include", "main,work", "main.py", kind, method)
    assert result.stdout == "[0, 1, 4] [0, 1]\n"
    [summary] = sequences(tmp_path)
    root = tree(tmp_path, summary["seq"])
    assert root["name"] == "__main__.main"
    # work.inner is traced in the workers (their import hook), under work.job; and the script's
    # own functions, which a worker re-imports as __mp_main__, are traced there as well.
    assert in_order([shape(hop) for hop in root["children"]]) == in_order([JOB] * 3 + [TASK] * 2)
    workers = set()
    for hop in root["children"]:
        assert hop["handoff"]["kind"] == "process"
        assert hop["process"]["pid"] != root["process"]["pid"]
        workers.add(hop["process"]["pid"])
    # Nothing else was heard of: no forkserver server, no resource tracker, no idle process.
    assert recorded_pids(tmp_path) == {root["process"]["pid"], *workers}


PROCESS = """
import multiprocessing
import sys

import work

if __name__ == "__main__":  # started outside any traced call: the child's sequence is its own
    process = multiprocessing.get_context(sys.argv[1]).Process(target=work.job, args=(3,))
    process.start()
    process.join(60)
    print(process.exitcode)
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_process_keeps_what_it_traced_whatever_its_start_method(
    tmp_path: Path, method: str
) -> None:
    """Fork and forkserver children end with os._exit, never running atexit: the tracer shuts
    down as the process's function returns, so the repository learns each process ended."""
    write_script(tmp_path / "work.py", WORK)
    write_script(tmp_path / "proc.py", PROCESS)
    result = tracer_run(tmp_path, "--include", "work", "proc.py", method)
    assert result.stdout == "0\n"
    [summary] = sequences(tmp_path)
    assert shape(tree(tmp_path, summary["seq"])) == JOB
    stats = cmr_json(tmp_path / "cmr.sqlite", "stats")
    assert [process["state"] for process in stats["processes"]] == ["ended", "ended"]


SUBPROCESSES = """
import os
import subprocess
import sys

def main():
    subprocess.run([sys.executable, "-m", "work", "4"], check=True)
    subprocess.run([sys.executable, "child.py", "inherited"], check=True)
    bare = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ["USER_DIR"]}
    bare["USER_DIR"] = os.environ["USER_DIR"]
    subprocess.run([sys.executable, "child.py", "own-env"], check=True, env=bare)
    subprocess.run([sys.executable, "-E", "child.py", "-E"], check=True)

main()
"""

CHILD = """
import os
import sys

import work

try:
    from sitecustomize import MARK
except ImportError:
    MARK = None

shadowed = [entry for entry in sys.path if entry.endswith(os.path.join("tracer", "bootstrap"))]
print(sys.argv[1], work.job(3), MARK, shadowed, os.environ["USER_DIR"] in sys.path)
"""


def test_python_subprocesses_trace_the_same_patterns_and_see_their_own_path(
    tmp_path: Path,
) -> None:
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    write_script(user_dir / "sitecustomize.py", "MARK = 'users-sitecustomize'\n")
    write_script(tmp_path / "work.py", WORK)
    write_script(tmp_path / "child.py", CHILD)
    write_script(tmp_path / "parent.py", SUBPROCESSES)
    result = tracer_run(
        tmp_path,
        "--include",
        "parent,work",
        "parent.py",
        PYTHONPATH=str(user_dir),
        USER_DIR=str(user_dir),
    )
    # The user's PYTHONPATH and sitecustomize are there; the bootstrap's directory is not.
    assert result.stdout.splitlines() == [
        "work 16",
        "inherited 9 users-sitecustomize [] True",
        "own-env 9 users-sitecustomize [] True",
        "-E 9 None [] False",
    ]
    [summary] = sequences(tmp_path)
    root = tree(tmp_path, summary["seq"])
    assert shape(root) == {
        "name": "__main__.main",
        "status": "ok",
        # `python -m work` runs work as __main__, traced as under `tracer run -m work`; a
        # script's imports are traced; a child with -E ignores PYTHONPATH: untraced (a limit).
        "children": [
            {"name": "__main__.job", "status": "ok", "children": [MAIN_INNER]},
            JOB,
            JOB,
        ],
    }
    pids = {hop["process"]["pid"] for hop in root["children"]}
    assert len(pids) == 3
    assert root["process"]["pid"] not in pids


def python_path(*entries: str) -> str:
    """The bootstrap's directory, ``entries``, then the PYTHONPATH the tests run with."""
    inherited = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    return os.pathsep.join([bootstrap.DIRECTORY, *entries, *inherited])


def test_the_bootstrap_does_nothing_unless_asked(tmp_path: Path) -> None:
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    write_script(user_dir / "sitecustomize.py", "MARK = 'users-sitecustomize'\n")
    probe = """
        import sys
        import sitecustomize
        print("tracer" in sys.modules, sys.argv[1] in sys.path)
        print(sitecustomize.MARK)
    """
    write_script(tmp_path / "probe.py", probe)
    result = run_python(
        tmp_path, "probe.py", bootstrap.DIRECTORY, PYTHONPATH=python_path(str(user_dir))
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "False False\nusers-sitecustomize\n"


def test_a_bootstrap_that_fails_reports_once_and_the_child_runs_untraced(
    tmp_path: Path,
) -> None:
    write_script(tmp_path / "work.py", WORK)
    result = run_python(
        tmp_path,
        "-m",
        "work",
        "5",
        PYTHONPATH=python_path(),
        INVOSEQ_RUN_INCLUDE="not/a/pattern",
        INVOSEQ_ENDPOINT="tcp://127.0.0.1:1",
        INVOSEQ_FLUSH_TIMEOUT_MS="0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "work 25\n"
    assert result.stderr.count("internal tracer error") == 1, result.stderr


APP = """
import handlers

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = handlers.answer(scope["path"])
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})
"""

HANDLERS = """
def answer(path):
    return render(path.upper())

def render(text):
    return text.encode()
"""


@contextmanager
def started(command: list[str], cwd: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session of its own: whatever happens, it and its children are killed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_DB=str(cwd / "cmr.sqlite"), INVOSEQ_SPOOL_DIR=str(cwd / "spool"))
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=output, stderr=output, start_new_session=True
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
        with contextlib.suppress(ProcessLookupError):  # workers the master left behind
            os.killpg(process.pid, signal.SIGKILL)


def test_uvicorn_workers_trace_the_app_and_flush_when_stopped(tmp_path: Path) -> None:
    write_script(tmp_path / "app.py", APP)
    write_script(tmp_path / "handlers.py", HANDLERS)
    port = free_port()
    log = tmp_path / "uvicorn.log"
    command = [sys.executable, "-m", "tracer", "run", "--no-report", "--include", "handlers"]
    command += ["-m", "uvicorn", "app:app", "--workers", "2", "--port", str(port)]
    command += ["--host", "127.0.0.1"]

    def ready() -> bool:
        assert master.poll() is None, log.read_text()
        return log.read_text().count("Application startup complete") == 2

    with started(command, tmp_path, log) as master:
        wait_for(ready, timeout_s=90, interval_s=0.1)
        answers = [http_get(port, f"/r{n}") for n in range(4)]
        assert {status for status, _ in answers} == {200}
        bodies = [body for _, body in answers]
        master.send_signal(signal.SIGINT)
        assert master.wait(60) == 0, log.read_text()
    assert bodies == [b"/R0", b"/R1", b"/R2", b"/R3"]
    summaries = sequences(tmp_path)
    assert len(summaries) == 4
    served = []
    for summary in summaries:
        root = tree(tmp_path, summary["seq"])
        request = shape(root)
        served.append(request.pop("name"))  # each request measured by uvicorn, by its path
        assert request == {
            "status": "ok",
            "children": [
                {
                    "name": "handlers.answer",
                    "status": "ok",
                    "children": [{"name": "handlers.render", "status": "ok"}],
                }
            ],
        }
        assert root["process"]["pid"] != master.pid  # recorded in a worker
    assert sorted(served) == [f"asgi.GET /r{n}" for n in range(4)]

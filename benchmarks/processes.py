"""The processes a benchmark runs: workers that measure in a fresh interpreter, and servers.

A worker is ``python -m benchmarks.<module> '<JSON parameters>'``; it prints its result as one
JSON line (``report_result``), which ``run_worker`` reads back. Every wait here is bounded.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

#: The prefix of the one line a worker subprocess prints with its JSON result.
RESULT_PREFIX: Final = "BENCHMARK-RESULT "


_KEPT: Final = frozenset({"INVOSEQ_WRAP", "INVOSEQ_CLOCK"})


def clean_environment(**settings: str) -> dict[str, str]:
    """This environment without any tracer setting, plus ``settings``: a worker traces only as
    the case configures it (and never spools into the user's cache). ``INVOSEQ_WRAP`` and
    ``INVOSEQ_CLOCK`` stay: they compare the wrappers with code instrumentation, and the TSC with
    ``clock_gettime`` (docs/performance.md)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_") or k in _KEPT}
    env.update(settings)
    return env


def run_worker(
    module: str,
    params: Mapping[str, Any],
    *,
    timeout_s: float,
    env: Mapping[str, str],
    prefix: Sequence[str] = (),
) -> dict[str, Any]:
    """Run ``python [prefix] -m <module> <params as JSON>`` and return the JSON it reports
    (``prefix``: ``-m tracer run ...``, to run the worker under ``tracer run``;
    ``run_reporting``)."""
    command = [sys.executable, *prefix, "-m", module, json.dumps(dict(params))]
    return run_reporting(command, module, timeout_s=timeout_s, env=env)


def run_reporting(
    command: list[str], label: str, *, timeout_s: float, env: Mapping[str, str]
) -> dict[str, Any]:
    """Run ``command`` (a worker, or a program that reports as one: under ``tracer run``, under
    another tool) from the repository's root and return the JSON it reports.

    The worker prints its result on one line starting with RESULT_PREFIX; anything else it prints
    is ignored. A worker that fails or overruns ``timeout_s`` raises RuntimeError naming
    ``label`` (the harness reports the case as failed and goes on)."""
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env),
            cwd=Path(__file__).resolve().parent.parent,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{label} did not finish within {timeout_s:.0f} s") from exc
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return result
    tail = done.stderr.strip().splitlines()[-5:]
    raise RuntimeError(f"{label} exited {done.returncode} without a result: {' | '.join(tail)}")


def report_result(result: Mapping[str, Any]) -> None:
    """The worker side of ``run_worker``."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def sent_and_dropped() -> dict[str, int]:
    """Under ``tracer run``, after a flush: what the tracer sent, dropped and spooled (empty
    when the program runs untraced)."""
    if "tracer" not in sys.modules:
        return {}
    import tracer

    tracer.flush(timeout_s=120)
    stats = tracer.stats()
    return {
        "sent_events": stats.sent_events,
        "dropped_events": stats.dropped_events,
        "spooled_events": stats.spooled_events,
    }


def worker_params() -> dict[str, Any]:
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: python -m {sys.argv[0]} '<JSON parameters>' (harness only)")
    params: dict[str, Any] = json.loads(sys.argv[1])
    return params


@contextmanager
def private_directory(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=prefix) as name:
        yield Path(name)


def start_reporting(
    command: list[str], ready: str, timeout_s: float = 30.0
) -> tuple[subprocess.Popen[str], str]:
    """Start a server subprocess and wait (bounded, no sleeping) for its first stdout line, which
    must start with ``ready``; returns the process and the rest of that line."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_environment(),
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        line = process.stdout.readline() if selector.select(timeout_s) else ""
    if not line.startswith(ready):
        stop(process)
        raise RuntimeError(f"{' '.join(command[:4])} did not start: {line.strip()!r}")
    return process, line[len(ready) :].strip()


def stop(process: subprocess.Popen[Any], timeout_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it does not exit within ``timeout_s``."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s)
    if process.stdout is not None:
        process.stdout.close()


def process_tree(root: int) -> tuple[list[int], list[int]]:
    """The processes under ``root`` (itself included), and among them the repository's (an
    embedded ``cmr serve``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    repository = [pid for pid in found if "cmr\0serve" in command_line(pid)]
    return [pid for pid in found if pid not in repository], repository


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def cpu_ns(pids: list[int]) -> int:
    """The CPU time of every thread of ``pids`` so far, in nanoseconds (``schedstat``)."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total


def free_port() -> int:
    """A TCP port free on 127.0.0.1 (bound to 0, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port

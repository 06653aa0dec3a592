"""Helpers for tests that run the real programs: `cmr serve`, traced scripts, `cmr` queries."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cmr.defaults import READY_PREFIX


def read_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    """One line of the process's stdout, waiting at most ``timeout_s`` (no sleeping). For a
    handshake line: the wait watches the pipe, so a line already read into the stream's buffer
    with an earlier one is not seen (to find one line among many, wait on the server itself)."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise AssertionError(f"no output from {process.args!r} within {timeout_s} s")
    return process.stdout.readline()


def run_program(
    command: list[str], *, timeout_s: float = 180, **options: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(command, capture_output=True, text=True)`` in a process group of its
    own, killed whole when the program is done or the test gives up (a timeout, pytest-timeout):
    a program's pool workers and forkserver must not outlive it as orphans."""
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **options,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@contextmanager
def own_session(
    command: list[str], *, timeout_s: float = 60, **options: Any
) -> Iterator[subprocess.Popen[str]]:
    """``subprocess.Popen(command, text=True, **options)`` in a session of its own, killed whole
    afterwards (the program and whatever it started: pool workers, a debugger's adapter), its
    pipes then read to the end within ``timeout_s``."""
    process = subprocess.Popen(command, text=True, start_new_session=True, **options)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=timeout_s)


@contextmanager
def cmr_server(db: Path, bind: str = "tcp://127.0.0.1:*") -> Iterator[str]:
    """A real `cmr serve` subprocess; yields its endpoint and stops it (SIGTERM) afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cmr", "serve", "--bind", bind, "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(process, 30)
        assert line.startswith(READY_PREFIX), (line, process.stderr and process.stderr.read())
        yield line[len(READY_PREFIX) :].strip()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        process.stderr.close()


def write_script(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source))
    return path


def traced_env(endpoint: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["INVOSEQ_ENDPOINT"] = endpoint
    env.update(extra)
    return env


def run_traced(
    script: Path, endpoint: str, args: list[str] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run a script as a traced program sending to ``endpoint``; it must exit 0."""
    result = run_program(
        [sys.executable, str(script), *(args or [])], env=traced_env(endpoint, **env)
    )
    assert result.returncode == 0, result.stderr
    return result


def run_python(tmp_path: Path, *command: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``python *command`` in ``tmp_path``, with no tracer settings from this environment, the
    repository file (for `tracer run`) and the spool under ``tmp_path``, and ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_DB=str(tmp_path / "cmr.sqlite"), NO_COLOR="1", **settings)
    env["INVOSEQ_SPOOL_DIR"] = str(tmp_path / "spool")
    return run_program([sys.executable, *command], cwd=tmp_path, env=env)


@contextmanager
def interactive(
    script: Path,
    endpoint: str,
    *args: str,
    launcher: tuple[str, ...] = (),
    **settings: str,
) -> Iterator[subprocess.Popen[str]]:
    """A traced program whose stdin and stdout the test drives; killed if the test fails.
    ``launcher`` goes between the interpreter and the script (``("-m", "tracer", "run")``)."""
    program = subprocess.Popen(
        [sys.executable, *launcher, str(script), *args],
        env=traced_env(endpoint, **settings),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield program
    finally:
        if program.poll() is None:
            program.kill()
        program.wait(10)
        for stream in (program.stdin, program.stdout):
            assert stream is not None
            stream.close()


def say(program: subprocess.Popen[str], line: str) -> None:
    assert program.stdin is not None
    program.stdin.write(line + "\n")
    program.stdin.flush()


def cmr(db: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "cmr", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def cmr_json(db: Path, *args: str) -> Any:
    return json.loads(cmr(db, *args, "--json").stdout)


def show_every_sequence(db: str | Path) -> dict[str, str]:
    """What `cmr show SEQ --json --db DB` prints for every sequence in ``db`` (without the final
    newline), by id: the command's own steps, through one store opened once as the command opens
    it, so reading hundreds of sequences costs no interpreter start or connection each."""
    from cmr.cli._support import open_for_reading
    from cmr.views.pipeline import view_sequence
    from cmr.views.render.json import iter_tree_json

    store = open_for_reading(str(db))
    try:
        return {
            summary.seq.hex(): b"".join(
                iter_tree_json(view_sequence(store, summary.seq, None, 0))
            ).decode()
            for summary in store.list_sequences(10**9)
        }
    finally:
        store.close()


def shape(node: dict[str, Any]) -> dict[str, Any]:
    """The parts of a `cmr show --json` node a hand-written expectation states."""
    out: dict[str, Any] = {"name": node["name"], "status": node["status"]}
    if node["error"]:
        out["error"] = node["error"]
    if node["children"]:
        out["children"] = [shape(child) for child in node["children"]]
    return out


def wait_for(predicate: Any, timeout_s: float = 30.0, interval_s: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns a truthy value (bounded in time)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on: bound, then released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def http_get(port: int, path: str, timeout_s: float = 30.0) -> tuple[int, bytes]:
    """GET ``path`` from 127.0.0.1:``port`` on a connection of its own: status and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", path, headers={"Connection": "close"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()

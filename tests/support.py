"""Helpers for tests that run the real programs: `cmr serve`, traced scripts, `cmr` queries."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

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
    from cmr.cli.common import open_for_reading
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


#: Where ``free_port`` looks: below Linux's ephemeral range (32768-60999), from which the kernel
#: takes the local port of every outgoing connection, and port 0's too. A port it handed out
#: could go to another test's client between the check and the server's bind (CI saw a uvicorn
#: fail with "Address already in use").
PORTS: Final = range(20_000, 32_768)


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released), outside the ephemeral
    range (``PORTS``)."""
    chooser = random.Random()
    for _ in range(100):
        port = chooser.choice(PORTS)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # in use
                continue
            return port
    raise OSError(f"no free port in {PORTS.start}-{PORTS.stop - 1} after 100 tries")


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


def store_one_sequence(db: Path, calls: int) -> str:
    """A SQLite repository at ``db`` holding one synthetic sequence of ``calls`` calls (fan-out
    10, ``benchmarks.synthetic``); its id."""
    from benchmarks import synthetic
    from cmr.store import open_store

    traffic = synthetic.one_sequence(puid=7, invocations=calls)
    store = open_store(str(db))
    try:
        for batch in synthetic.decoded(traffic):
            store.ingest(batch, time.time_ns())
    finally:
        store.close()
    return traffic.seqs[0].hex()


#: What a progress line is drawn after: back to the line's start, and clear it.
ERASE = b"\r\x1b[K"
#: Progress at once and at every update (the undocumented knobs of ``cmr.cli.progress``).
PROGRESS_NOW = {"INVOSEQ_PROGRESS_AFTER": "0", "INVOSEQ_PROGRESS_EVERY": "0"}
TERMINAL_TIMEOUT_S = 120.0


def _terminal_environment(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_PROGRESS")}
    env.update(extra, COLUMNS="200", INVOSEQ_DB=str(tmp_path / "default.sqlite"))
    return env


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: bytes
    stderr: bytes  # what the terminal (or the pipe) received

    def drawn(self) -> list[str]:
        """The progress lines drawn on the terminal, in order: each is followed by an erase (the
        next line's, or the last one's), after which the command says what it says."""
        return [part.decode() for part in self.stderr.split(ERASE)[1:-1]]


def _environment(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_PROGRESS")}
    env.update(extra, COLUMNS="200", INVOSEQ_DB=str(tmp_path / "default.sqlite"))
    return env


def run_on_terminal(
    tmp_path: Path, command: list[str], *, terminal: bool, env: dict[str, str] | None = None
) -> Ran:
    """Run ``command`` with stdout into a file and stderr on a pseudo-terminal (or a pipe), read
    to its end within TERMINAL_TIMEOUT_S; the process and the terminal are gone afterwards."""
    out_path = tmp_path / f"stdout-{time.monotonic_ns()}"
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(out_path, "wb"))
        if terminal:
            master, slave = os.openpty()
            stack.callback(os.close, master)
            with contextlib.suppress(OSError):
                os.set_blocking(master, False)
        else:
            master, slave = os.pipe()
            stack.callback(os.close, master)
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=slave,
                env=_terminal_environment(tmp_path, env or {}),
                cwd=tmp_path,
                start_new_session=True,
            )
        finally:
            os.close(slave)  # the child's copy is the only one: its exit ends the stream
        stack.callback(_kill, process)
        received = _read_to_end(master, time.monotonic() + TERMINAL_TIMEOUT_S)
        code = process.wait(TERMINAL_TIMEOUT_S)
    return Ran(code, out_path.read_bytes(), received)


def _read_to_end(fd: int, deadline: float) -> bytes:
    chunks = []
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, (
                f"no end of output within {TERMINAL_TIMEOUT_S} s: {b''.join(chunks)!r}"
            )
            if not selector.select(remaining):
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:  # EIO: a terminal's last writer closed it
                break
            if not chunk:  # a pipe's
                break
            chunks.append(chunk)
    return b"".join(chunks)


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(TERMINAL_TIMEOUT_S)

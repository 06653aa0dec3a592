"""Real processes for the reliability tests: a `cmr serve` that can be killed and started again on
the same address and file, traced programs driven line by line, and exact reads of the file.

Everything waits on output lines or polls with a bound; nothing sleeps to let time pass."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import msgspec

from invoseq import wire
from tests.support import READY_PREFIX

#: Seconds a process gets to print an expected line, start, or exit: generous, for a loaded CI box.
PATIENCE_S = 60.0


def free_endpoint() -> str:
    """A TCP endpoint on loopback whose port is free now: a repository started on it can be
    killed and started again on the same address (a ``*`` port would change)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


class LineReader:
    """Whole lines from a pipe, waiting at most a given time for each (the pipe is read raw, so
    no line sits unseen in a text buffer while the selector waits)."""

    def __init__(self, stream: IO[bytes], what: str) -> None:
        self._fd = stream.fileno()
        self._what = what
        self._pending = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._fd, selectors.EVENT_READ)

    def line(self, timeout_s: float) -> str:
        while b"\n" not in self._pending:
            if not self._selector.select(timeout_s):
                raise AssertionError(f"{self._what}: no complete line within {timeout_s} s")
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise AssertionError(f"{self._what} closed its output; unread: {self._pending!r}")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode()

    def close(self) -> None:
        self._selector.close()


class Repository:
    """`cmr serve` on a fixed endpoint and file: started, killed (SIGKILL: a crash) and started
    again as often as a test likes. Its stderr goes to files next to the repository."""

    def __init__(self, db: Path, endpoint: str) -> None:
        self.db = db
        self.endpoint = endpoint
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: LineReader | None = None
        self._starts = 0

    def start(self) -> None:
        assert self._process is None, "the repository is already running"
        self._starts += 1
        log = self.db.with_name(f"{self.db.stem}.serve-{self._starts}.err")
        command = [sys.executable, "-m", "cmr", "serve", "--bind", self.endpoint]
        with log.open("wb") as stderr:
            self._process = subprocess.Popen(
                [*command, "--db", str(self.db)], stdout=subprocess.PIPE, stderr=stderr
            )
        assert self._process.stdout is not None
        self._reader = LineReader(self._process.stdout, "cmr serve")
        try:
            line = self._reader.line(PATIENCE_S)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; stderr: {log.read_text()}") from None
        assert line == READY_PREFIX + self.endpoint, (line, log.read_text())

    def freeze(self) -> None:
        """Stop it dead where it is (SIGSTOP), connections open: what is sent to it from now on
        stays unacknowledged, in flight, until it is killed."""
        assert self._process is not None, "the repository is not running"
        self._process.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        """Crash it: SIGKILL, no chance to finish a transaction or send an acknowledgement."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """Stop it cleanly (SIGTERM), as an operator would."""
        self._end(signal.SIGTERM)

    def _end(self, how: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(how)
            process.send_signal(signal.SIGCONT)  # a frozen repository handles a SIGTERM now
        try:
            process.wait(PATIENCE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(PATIENCE_S)
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        assert process.stdout is not None
        process.stdout.close()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None


class Program:
    """A traced program whose stdin the test writes and whose stdout lines it waits for. Lines
    the program prints for the test are ``WORD {json}``."""

    def __init__(self, command: list[str], env: dict[str, str], stderr: Path) -> None:
        self.stderr_path = stderr
        with stderr.open("wb") as err:
            self.process = subprocess.Popen(
                command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            )
        assert self.process.stdout is not None
        self._reader = LineReader(self.process.stdout, f"program {command[1:]}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def expect(self, word: str, timeout_s: float = PATIENCE_S) -> Any:
        """The next line, which must be ``word {json}``: its JSON."""
        try:
            line = self._reader.line(timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; stderr: {self.stderr()}") from None
        head, _, payload = line.partition(" ")
        assert head == word, (line, self.stderr())
        return json.loads(payload)

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def wait(self, timeout_s: float = PATIENCE_S) -> int:
        return self.process.wait(timeout_s)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(PATIENCE_S)
        self._reader.close()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def broadcast(programs: Iterable[Program], line: str, answer: str) -> list[Any]:
    """Say ``line`` to every program (all of them at once), then wait for each one's ``answer``:
    its JSON, in the programs' order."""
    programs = list(programs)
    for program in programs:
        program.say(line)
    return [program.expect(answer) for program in programs]


def program_env(endpoint: str, spool_dir: Path, **settings: str) -> dict[str, str]:
    """A traced program's environment: none of this process's tracer settings but the choice of
    hot path (INVOSEQ_PURE), the spool in ``spool_dir``, no stack sampler (its samples would blur
    the byte counts), and ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    if "INVOSEQ_PURE" in os.environ:  # the hot path under test stays the one asked for
        env["INVOSEQ_PURE"] = os.environ["INVOSEQ_PURE"]
    env.update(
        INVOSEQ_ENDPOINT=endpoint,
        INVOSEQ_SPOOL_DIR=str(spool_dir),
        INVOSEQ_SAMPLE_INTERVAL_MS="0",
    )
    env.update(settings)
    return env


def query(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """Rows read straight from the repository file (read-only, while `cmr serve` may write)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def stored_by_pid(db: Path) -> dict[int, tuple[int, int]]:
    """For each process the repository heard from, by pid: (Start events, End events) stored,
    counted in the stored batches themselves (an End whose Start was dropped counts too)."""
    decode = msgspec.msgpack.Decoder(list[wire.ThreadChunk]).decode
    counts = {pid: (0, 0) for (pid,) in query(db, "SELECT pid FROM processes")}
    rows = query(
        db,
        "SELECT p.pid, b.chunks FROM batches b JOIN processes p ON p.puid = b.puid "
        "WHERE b.chunks IS NOT NULL",
    )
    for pid, blob in rows:
        events = [event for chunk in decode(blob) for event in chunk.events]
        starts, ends = counts[pid]
        counts[pid] = (
            starts + sum(isinstance(e, wire.Start) for e in events),
            ends + sum(isinstance(e, wire.End | wire.Error) for e in events),
        )
    return counts

"""Helpers for `cmr ui` tests: the real command as a subprocess, and plain HTTP requests to it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmr.defaults import READY_PREFIX
from tests.support import cmr_server, read_line, run_traced, traced_env, write_script


@dataclass
class Reply:
    status: int
    content_type: str
    body: str
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        assert self.content_type == "application/json", (self.status, self.body)
        return json.loads(self.body)


@dataclass
class UI:
    """A running `cmr ui`: its address and its process."""

    url: str
    process: subprocess.Popen[str]

    def get(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        """GET ``path`` (below the root); an error status is returned, not raised."""
        request = urllib.request.Request(self.url + path.lstrip("/"), headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return _reply(response.status, response.headers, response.read())
        except urllib.error.HTTPError as error:
            with error:
                return _reply(error.code, error.headers, error.read())

    def json(self, path: str) -> Any:
        reply = self.get(path)
        assert reply.status == 200, (path, reply.status, reply.body)
        return reply.json()


def _reply(status: int, headers: Any, body: bytes) -> Reply:
    content_type = headers.get("Content-Type", "").split(";")[0]
    return Reply(status, content_type, body.decode(), dict(headers.items()))


def filled_repository(root: Path, program: str) -> Path:
    """A repository file under ``root`` holding what ``program`` (a script's source) did, run
    traced against a real `cmr serve`."""
    db = root / "cmr.sqlite"
    with cmr_server(db) as endpoint:
        run_traced(write_script(root / "program.py", program), endpoint)
    return db


def start_ui(db: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cmr", "ui", *args, "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, then kill if it does not go; close its pipes."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    for stream in (process.stdout, process.stderr):
        assert stream is not None
        stream.close()


@contextmanager
def running_ui(db: Path, *args: str) -> Iterator[UI]:
    """A real `cmr ui --port 0` on ``db``; yields once it printed its address."""
    process = start_ui(db, "--port", "0", *args)
    try:
        line = read_line(process, 60)
        assert line.startswith(READY_PREFIX), (line, process.stderr and process.stderr.read())
        yield UI(line[len(READY_PREFIX) :].strip(), process)
    finally:
        stop(process)


#: A traced program that stays inside its root call, ``watch``, until the test lets it go: each
#: round adds three calls, stores them (``tracer.flush`` waits for the acknowledgement), says
#: so on stdout and waits for a line on stdin. The stack sampler is off (see ``live_program``),
#: so every bar of the view is one of these calls.
WATCH = """
import sys
import tracer

@tracer.traced
def watch(rounds):
    for n in range(rounds):
        for _ in range(3):
            tick(n)
        tracer.flush()
        print(f"round {n}", flush=True)
        sys.stdin.readline()

@tracer.traced
def tick(n):
    return n

watch(int(sys.argv[1]))
"""


def calls_after(round_no: int) -> int:
    """Calls ``WATCH`` has stored once it printed ``round <round_no>``: the root, three a round."""
    return 1 + 3 * (round_no + 1)


@contextmanager
def live_program(tmp_path: Path, endpoint: str, rounds: int) -> Iterator[subprocess.Popen[str]]:
    """``WATCH`` running traced without the stack sampler; killed if the test fails."""
    script = write_script(tmp_path / "watch.py", WATCH)
    program = subprocess.Popen(
        [sys.executable, str(script), str(rounds)],
        env=traced_env(endpoint, INVOSEQ_SAMPLE_INTERVAL_MS="0"),
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

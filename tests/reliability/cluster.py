"""Several `cmr serve` nodes for the scaling tests: on separate files, or sharing one database
(a SQLite file, or PostgreSQL: ``tests.requirements.postgres_database``), and reads of what they
stored through the `cmr` command line."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.reliability.harness import PATIENCE_S, LineReader, free_endpoint
from tests.support import READY_PREFIX


class Node:
    """One `cmr serve` on a fixed endpoint, storing into ``db`` (a path or a URL); its stderr
    goes to ``log``. Started, frozen (SIGSTOP), killed (SIGKILL) or stopped (SIGTERM)."""

    def __init__(self, db: str, log: Path) -> None:
        self.db = db
        self.endpoint = free_endpoint()
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: LineReader | None = None

    def start(self) -> None:
        assert self._process is None, "the node is already running"
        command = [sys.executable, "-m", "cmr", "serve", "--bind", self.endpoint, "--db", self.db]
        with self.log.open("ab") as stderr:
            self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr)
        assert self._process.stdout is not None
        self._reader = LineReader(self._process.stdout, f"cmr serve {self.endpoint}")
        try:
            line = self._reader.line(PATIENCE_S)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; stderr: {self.log.read_text()}") from None
        assert line == READY_PREFIX + self.endpoint, (line, self.log.read_text())

    def freeze(self) -> None:
        """Stop it dead where it is (SIGSTOP), connections open: what is sent to it from now on
        stays unacknowledged, in flight, until it is killed."""
        assert self._process is not None, "the node is not running"
        self._process.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        self._end(kill=True)

    def stop(self) -> None:
        self._end(kill=False)

    def _end(self, *, kill: bool) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            if kill:
                process.kill()
            else:
                process.terminate()
                process.send_signal(signal.SIGCONT)  # a frozen node handles the SIGTERM now
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
        assert process.returncode == (-9 if kill else 0), (process.returncode, self.log.read_text())


@contextlib.contextmanager
def nodes(dbs: list[str], directory: Path) -> Iterator[list[Node]]:
    """Started nodes, one per entry of ``dbs`` (entries may repeat: nodes sharing a database);
    all stopped afterwards."""
    started = [Node(db, directory / f"node-{i}.err") for i, db in enumerate(dbs)]
    try:
        for node in started:
            node.start()
        yield started
    finally:
        with contextlib.ExitStack() as stopping:  # every node is stopped, even when one fails to
            for node in started:
                stopping.callback(node.stop)


def cmr_out(db: str, *args: str) -> str:
    """`cmr ARGS --db DB` run as a user runs it; its standard output."""
    result = subprocess.run(
        [sys.executable, "-m", "cmr", *args, "--db", db],
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def cmr_json(db: str, *args: str) -> Any:
    return json.loads(cmr_out(db, *args, "--json"))

"""Several `cmr serve` nodes for the scaling tests: on separate files, or sharing one database
(a SQLite file, or PostgreSQL when ``INVOSEQ_TEST_PG`` names a server), and reads of what they
stored through the `cmr` command line."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.reliability.harness import PATIENCE_S, LineReader, free_endpoint
from tests.support import READY_PREFIX

ENV_TEST_PG = "INVOSEQ_TEST_PG"


class Node:
    """One `cmr serve` on a fixed endpoint, storing into ``db`` (a path or a URL); its stderr
    goes to ``log``. Started, killed (SIGKILL) or stopped (SIGTERM)."""

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
        for node in started:
            node.stop()


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A repository URL of its own on the PostgreSQL server the tests may use (a fresh schema,
    dropped afterwards), or a visible skip saying why there is none."""
    server = os.environ.get(ENV_TEST_PG, "")
    if not server:
        pytest.skip(
            f"no PostgreSQL server: run .ci/postgres.sh and set {ENV_TEST_PG}="
            "postgresql://invoseq:invoseq@127.0.0.1:5432/invoseq"
        )
    if importlib.util.find_spec("cmr.store.postgres") is None:
        pytest.skip("the PostgreSQL store (cmr/store/postgres.py) is not there")
    import psycopg

    schema = f"nodes_{secrets.token_hex(6)}"
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as exc:
        pytest.skip(f"{ENV_TEST_PG} is unreachable: {str(exc).strip().splitlines()[0]}")
    options = quote(f"-csearch_path={schema}", safe="")
    try:
        yield f"{server}{'&' if '?' in server else '?'}options={options}"
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


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


def cmr_in_process(db: str, *args: str) -> str:
    """`cmr ARGS --db DB` through the same entry point, in this process: reading hundreds of
    sequences costs no interpreter start each."""
    from cmr.cli import main

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = main([*args, "--db", db])
    assert code == 0, captured.getvalue()
    return captured.getvalue()

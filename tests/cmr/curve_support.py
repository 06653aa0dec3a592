"""Key pairs for CURVE tests, made the way a user makes them (`cmr keys generate`)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import READY_PREFIX, read_line


@dataclass(frozen=True)
class Keys:
    """The repository's pair, the allowed clients' directory, and client pairs: ``allowed``
    (its public key in the directory), ``stranger`` (never in it) and ``revoked`` (removed from
    it before any server starts)."""

    root: Path
    allowed_clients: Path

    def secret(self, name: str) -> Path:
        return self.root / f"{name}.key_secret"

    def public(self, name: str) -> Path:
        return self.root / f"{name}.key"


def generate(directory: Path, name: str) -> None:
    """`cmr keys generate --dir DIRECTORY --name NAME`, through the command's entry point in
    this process: no interpreter to start per key (tests/cmr/server/test_curve.py checks what the
    command writes)."""
    from cmr.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["keys", "generate", "--dir", str(directory), "--name", name])
    assert code == 0, err.getvalue()


def make_keys(root: Path) -> Keys:
    allowed_clients = root / "clients"
    allowed_clients.mkdir(parents=True)
    for name in ("repository", "allowed", "stranger", "revoked"):
        generate(root, name)
    for name in ("allowed", "revoked"):
        shutil.copy(root / f"{name}.key", allowed_clients / f"{name}.key")
    os.unlink(allowed_clients / "revoked.key")  # revoked: removed before the server starts
    return Keys(root, allowed_clients)


@contextmanager
def curve_server(db: Path, keys: Keys) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A real `cmr serve` with CURVE on a wildcard port; yields its endpoint and process, and
    stops it (SIGTERM) afterwards: it must exit 0."""
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "cmr", "serve", "--bind", "tcp://127.0.0.1:*"),
            *("--db", str(db), "--curve-secret", str(keys.secret("repository"))),
            *("--allowed-clients", str(keys.allowed_clients)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(process, 30)
        assert line.startswith(READY_PREFIX), line
        yield line[len(READY_PREFIX) :].strip(), process
    finally:
        process.terminate()
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=10)
            raise
    assert process.returncode == 0, err

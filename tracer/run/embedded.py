"""The repository ``tracer run`` starts for itself when none is configured, and the report it
prints from it afterwards.

The repository is ``python -m cmr serve`` in a subprocess, listening on an ipc:// socket in a
private temporary directory. It runs in a session of its own, so the terminal's Ctrl-C reaches
the traced program only and the repository stays up to receive the last events; on Linux it is
also told to stop if ``tracer run`` dies without stopping it. Only the process that started it
stops it: a child forked from that process (a gunicorn worker) holds a copy of this object, not
the repository its siblings still send to.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import IO, Final

from cmr.defaults import READY_PREFIX

#: How long the repository may take to start, and to stop once asked.
START_TIMEOUT_S: Final = 15.0
STOP_TIMEOUT_S: Final = 10.0
#: Sockets paths longer than this do not fit in ``sockaddr_un`` on every platform.
_MAX_SOCKET_PATH: Final = 100
_PR_SET_PDEATHSIG: Final = 1


class RepositoryError(Exception):
    """The embedded repository could not start (a one-line message)."""


class EmbeddedRepository:
    """A running ``cmr serve`` subprocess; ``stop()`` ends it and removes its socket directory."""

    def __init__(self, process: subprocess.Popen[bytes], endpoint: str, workdir: str) -> None:
        self.process = process
        self.endpoint = endpoint
        self._workdir = workdir
        self._owner = os.getpid()
        self._stopping = False

    @classmethod
    def start(
        cls,
        db: str,
        *,
        timeout_s: float = START_TIMEOUT_S,
        meanwhile: Callable[[], object] | None = None,
    ) -> EmbeddedRepository:
        """Start the repository on ``db`` and wait until it listens, running ``meanwhile`` (work
        of this process's own that needs no repository) while it starts. Raises
        RepositoryError."""
        workdir = tempfile.mkdtemp(prefix="invoseq-")
        if len(os.path.join(workdir, "cmr.sock")) > _MAX_SOCKET_PATH:
            shutil.rmtree(workdir, ignore_errors=True)
            workdir = tempfile.mkdtemp(prefix="invoseq-", dir="/tmp")
        try:
            parent = os.path.dirname(os.path.abspath(db))
            os.makedirs(parent, exist_ok=True)
            stderr_path = os.path.join(workdir, "cmr.log")
            with open(stderr_path, "wb") as stderr:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "cmr",
                        "serve",
                        "--bind",
                        f"ipc://{os.path.join(workdir, 'cmr.sock')}",
                        "--db",
                        db,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    start_new_session=True,
                    preexec_fn=_stop_with_parent(),  # noqa: PLW1509 (only async-signal-safe work)
                )
        except OSError as exc:
            shutil.rmtree(workdir, ignore_errors=True)
            raise RepositoryError(f"could not start the repository: {exc}") from None
        repository = cls(process, "", workdir)
        try:
            if meanwhile is not None:
                meanwhile()
            repository.endpoint = repository._wait_ready(time.monotonic() + timeout_s)
        except BaseException:  # not started, or Ctrl-C while waiting: leave nothing behind
            repository.stop()
            raise
        return repository

    def _wait_ready(self, deadline: float) -> str:
        assert self.process.stdout is not None
        line = _read_line(self.process.stdout, deadline)
        if line is None or not line.startswith(READY_PREFIX):
            reason = self._last_error() or (
                "it did not report listening in time" if line is None else f"it said {line!r}"
            )
            raise RepositoryError(f"the repository (cmr serve) did not start: {reason}")
        return line.removeprefix(READY_PREFIX).strip()

    def _last_error(self) -> str:
        if self.process.poll() is None:
            return ""
        try:
            with open(
                os.path.join(self._workdir, "cmr.log"), encoding="utf-8", errors="replace"
            ) as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            lines = []
        return lines[-1] if lines else f"it exited with code {self.process.returncode}"

    def request_stop(self) -> None:
        """Ask the repository to stop (SIGTERM) without waiting: ``stop`` waits. It commits what
        it received before it exits; readers of its database meanwhile see every commit."""
        if os.getpid() == self._owner and not self._stopping and self.process.poll() is None:
            self._stopping = True  # once: a second SIGTERM would end it before it commits
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> str | None:
        """Stop the repository (SIGTERM, then SIGKILL if it hangs) and clean up. Returns a
        one-line problem when it did not end cleanly, else None. In a forked child of the
        process that started it: nothing (it is not the child's to stop)."""
        if os.getpid() != self._owner:
            return None
        problem = None
        self.request_stop()
        try:
            self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            problem = f"the repository did not stop within {timeout_s:g} s and was killed"
        if problem is None and self.process.returncode != 0:
            problem = f"the repository exited with code {self.process.returncode}: " + (
                self._last_error()
            )
        shutil.rmtree(self._workdir, ignore_errors=True)
        return problem


def _read_line(stream: IO[bytes], deadline: float) -> str | None:
    """One line from a pipe, waiting at most until ``deadline``; None on timeout or end of file."""
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                return None
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                return None
            data += chunk
    return data.split(b"\n", 1)[0].decode("utf-8", errors="replace")


def _stop_with_parent() -> Callable[[], None] | None:
    """A pre-exec step asking Linux to send SIGTERM to the child when its parent dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None

    def request() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return request

"""A pipe that wakes the server's poll at once when it is asked to stop.

The server thread polls its sockets with a timeout (``server.POLL_MS``) and looks at its stop
event between polls. A stop asked for meanwhile (SIGTERM to ``cmr serve``, whose Python handler
runs inside pyzmq's poll, which then polls again for the time left; ``ServerThread.stop`` from
another thread) waited for the timeout: a tenth of a second at every end of ``tracer run``, which
waits for its repository to stop. The poll also watches this pipe's read end, and a stop writes
a byte to it.

A signal's own handler runs in Python, between two bytecodes of the main thread, and the
interpreter looks for pending handlers only at a function's start and a loop's jump back: a
signal arriving after pyzmq's last such point and before its ``poll`` call found the poll
already waiting, the handler not yet run, and nothing to wake it. `cmr serve` therefore also
hands the write end to ``signal.set_wakeup_fd`` (``signal_fd``): CPython's C-level handler
writes the signal's number to it the moment the signal arrives, whatever thread it reaches.
"""

from __future__ import annotations

import contextlib
import os
import threading


class Wakeup:
    """The pipe: ``fd`` to poll, ``wake`` from any thread or a signal handler, ``clear`` from the
    polling thread once it has woken, ``close`` once (after which ``wake`` does nothing)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # wake and close: never a write to a closed (reused) fd
        self.fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._closed = False

    @property
    def signal_fd(self) -> int:
        """The write end, for ``signal.set_wakeup_fd`` (non-blocking, as it must be); give it
        back before ``close``."""
        return self._write_fd

    def wake(self) -> None:
        with self._lock:
            if self._closed:
                return
            with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending already
                os.write(self._write_fd, b"\0")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):  # emptied
            while os.read(self.fd, 512):
                pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self.fd)
            os.close(self._write_fd)

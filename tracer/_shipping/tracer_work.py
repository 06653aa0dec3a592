"""Which threads are doing the tracer's own work now (starting its threads, waiting in a
flush): time the program did not spend on its own, which the sampler never samples.

More in docs/architecture.md, "The stack sampler".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class TracerWork:
    """The idents of the threads inside ``doing()``. The set is replaced, never changed, under a
    lock, so that the sampler reads ``threads`` without one."""

    def __init__(self) -> None:
        self.threads: frozenset[int] = frozenset()
        # Reentrant: a program's SIGTERM handler may flush while its thread is in ``doing()``.
        self._lock = threading.RLock()

    @contextmanager
    def doing(self) -> Iterator[None]:
        """The calling thread does the tracer's work meanwhile (reentrant)."""
        ident = threading.get_ident()
        with self._lock:
            mine = ident not in self.threads
            if mine:
                self.threads = self.threads | {ident}
        try:
            yield
        finally:
            if mine:
                with self._lock:
                    self.threads = self.threads - {ident}

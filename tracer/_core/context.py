"""The invocation context: one ContextVar holding one immutable value.

The value is a tuple ``(seq, parent, hid)``: the sequence id (16 bytes), the current invocation's
id in this process, and a pending hand-off id (0 for none). The next traced call records a Start
with that parent and hand-off, then runs with ``(seq, its own iid, 0)``: a hand-off is consumed by
the first invocation on the other side of a hop. ``None`` means no sequence is active, so the next
traced call starts one. A tuple is the cheapest immutable value to build on the hot path;
attach/detach use ContextVar tokens, so a ``try/finally`` always restores exactly what was there.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Final

Current = tuple[bytes, int, int]

current: Final[contextvars.ContextVar[Current | None]] = contextvars.ContextVar(
    "invoseq_current", default=None
)


def current_sequence() -> str | None:
    """The active sequence id as 32 hex digits, or None outside any traced call."""
    value = current.get()
    return None if value is None else value[0].hex()


@contextlib.contextmanager
def detached() -> Iterator[None]:
    """No sequence attached for the block: threads and processes started in it inherit none (the
    tracer's own threads, a pool's workers, which serve many sequences)."""
    token = current.set(None)
    try:
        yield
    finally:
        current.reset(token)

"""The invocation context: one ContextVar holding one immutable value.

The value is a tuple ``(seq, iid)``: the sequence id (16 bytes) and the current invocation's id in
this process. ``None`` means no sequence is active, so the next traced call starts one. A tuple is
the cheapest immutable value to build on the hot path; attach/detach use ContextVar tokens, so a
``try/finally`` always restores exactly what was there.
"""

from __future__ import annotations

import contextvars
from typing import Final

Current = tuple[bytes, int]

current: Final[contextvars.ContextVar[Current | None]] = contextvars.ContextVar(
    "invoseq_current", default=None
)


def current_sequence() -> str | None:
    """The active sequence id as 32 hex digits, or None outside any traced call."""
    value = current.get()
    return None if value is None else value[0].hex()

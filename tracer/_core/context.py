"""The invocation context: one ContextVar holding one immutable value per strand.

More in docs/architecture.md, "tracer/_core/context.py".
"""

from __future__ import annotations

import contextlib
import contextvars

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Final

Current = tuple[bytes, int, int]
#: What the ContextVar holds: a ``Current``, or one with its ``origin`` (a synchronous root's
#: value is a C ``RootValue`` with the C accelerator: a sequence of the same four items).
Value = Current | tuple[bytes, int, int, int]

current: Final[contextvars.ContextVar[Value | None]] = contextvars.ContextVar(
    "invoseq_current", default=None
)


def current_sequence() -> str | None:
    """The active sequence id as 32 hex digits, or None outside any traced call."""
    value = current.get()
    if value is None or getattr(value, "closed", False):  # a closed root's (tracer._core.stack)
        return None
    return str(value[0].hex())


@contextlib.contextmanager
def detached() -> Iterator[None]:
    """No sequence attached for the block: threads and processes started in it inherit none (the
    tracer's own threads, a pool's workers, which serve many sequences)."""
    token = current.set(None)
    try:
        yield
    finally:
        current.reset(token)

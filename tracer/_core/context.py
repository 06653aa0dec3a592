"""The invocation context: one ContextVar holding one immutable value per strand.

More in docs/architecture.md, "tracer/_core/context.py".
"""

from __future__ import annotations

import contextlib
import contextvars
import sys

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Final, TypeVar

    T = TypeVar("T")

Current = tuple[bytes, int, int]
#: What the ContextVar holds: a ``Current``, or one with its ``origin`` (a synchronous root's
#: value is a C ``RootValue`` with the C accelerator: a sequence of the same four items).
Value = Current | tuple[bytes, int, int, int]

current: Final[contextvars.ContextVar[Value | None]] = contextvars.ContextVar(
    "invoseq_current", default=None
)


if sys.version_info < (3, 12):
    import gc
    from _thread import get_ident as _get_ident

    #: The thread running a cyclic collection (its ident), 0 when none runs. Before 3.12 a
    #: collection starts inside an allocation, so its finalizers (a traced generator's close, a
    #: __del__ calling traced code) run in the middle of whatever allocated, a ContextVar write
    #: among others: that write reads the context's mapping before it allocates and replaces it
    #: after, and a finalizer's write to the same context in between frees the mapping under it
    #: (memory corruption; the C handlers keep the same rule: _speedups.c, g_collecting). So the
    #: tracer's own writes (``set_current``) write nothing while their thread collects.
    _collecting = 0
    #: The token of a write ``set_current`` left out: ``reset_current`` has nothing to undo.
    NOT_WRITTEN: Final[object] = object()

    def _gc_phase(phase: str, info: object) -> None:
        global _collecting
        _collecting = _get_ident() if phase == "start" else 0

    gc.callbacks.append(_gc_phase)

    def guarded(
        var: contextvars.ContextVar[T],
    ) -> tuple[Callable[[T], object], Callable[[object], None]]:
        """``var.set`` and ``var.reset``, except that inside a collection on this thread the set
        writes nothing (its token NOT_WRITTEN) and the reset of that token undoes nothing. The
        tracer's value and the integrations' own ContextVars (a request being served, a client
        call, a task running) are written so: by code a collection may run (a traced
        generator's close, a middleware's coroutine the collector closes)."""
        set_value = var.set
        reset_value = var.reset

        def set_guarded(value: T) -> object:
            if _collecting and _collecting == _get_ident():
                return NOT_WRITTEN
            return set_value(value)

        def reset_guarded(token: object) -> None:
            if token is not NOT_WRITTEN:
                reset_value(token)  # type: ignore[arg-type]

        return set_guarded, reset_guarded

    set_current, reset_current = guarded(current)

else:  # 3.12+ collects only between bytecodes: a ContextVar write is never interrupted
    NOT_WRITTEN = object()
    set_current = current.set  # type: ignore[assignment]
    reset_current = current.reset  # type: ignore[assignment]

    def guarded(
        var: contextvars.ContextVar[T],
    ) -> tuple[Callable[[T], object], Callable[[object], None]]:
        """``var``'s own set and reset (a collection never interrupts them)."""
        return var.set, var.reset  # type: ignore[return-value]


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
    token = set_current(None)
    try:
        yield
    finally:
        reset_current(token)

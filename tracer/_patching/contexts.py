"""Contexts copied inside a synchronous call carry that call (docs/architecture.md, "The
invocation stack").

More in docs/architecture.md, "tracer/_patching/contexts.py".
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tracer._core import context, recorder, stack

_var: Final = context.current
_get = context.current.get
#: Writes into a copied context only, which holds its own reference to the mapping: not the
#: write a collection can interrupt (context.set_current).
_set = context.current.set
_nested = stack.nested
_COPIED_MARK: Final = "__invoseq_exact_copy__"


class Copied(tuple[bytes, int, int]):
    """The context value a copy taken inside a nested call carries; ``source`` is the value the
    ContextVar held where it was copied."""

    source: Any


def exact_copy(original: Callable[[], contextvars.Context]) -> Callable[[], contextvars.Context]:
    if getattr(original, _COPIED_MARK, False):
        return original

    @functools.wraps(original)
    def copy_context() -> contextvars.Context:
        copied = original()
        try:
            exact = _nested()
            if exact is not None:
                value = Copied(exact)
                value.source = _get()
                copied.run(_set, value)
        except Exception as exc:
            recorder.internal_error(exc)
        return copied

    setattr(copy_context, _COPIED_MARK, True)
    return copy_context


def copy_context_in(module: ModuleType) -> list[tuple[Any, str, Callable[[Any], Any]]]:
    """The patch of a module that bound ``copy_context`` at import (anyio's backends)."""
    if not callable(getattr(module, "copy_context", None)):
        raise TypeError(f"{module.__name__} has no copy_context")
    return [(module, "copy_context", exact_copy)]


def restore_context(original: Callable[[contextvars.Context], None]) -> Callable[..., None]:
    """asgiref's ``_restore_context(context)``: ours is never carried back to where the copy
    was taken."""

    @functools.wraps(original)
    def restore(copied: contextvars.Context, *args: Any, **kwargs: Any) -> None:
        try:
            value = copied.get(_var)
            if isinstance(value, Copied) and value.source is _get():
                copied.run(_set, value.source)
        except Exception as exc:
            recorder.internal_error(exc)
        original(copied, *args, **kwargs)

    return restore


PATCHES: tuple[tuple[Any, str, Callable[[Any], Any]], ...] = (
    (contextvars, "copy_context", exact_copy),
)

__all__ = ["PATCHES", "Copied", "copy_context_in", "exact_copy", "restore_context"]

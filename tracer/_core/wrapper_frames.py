"""The tracer's wrapper frames, known by their code objects rather than by file name.

More in docs/architecture.md, "tracer/_core/wrapper_frames.py".
"""

from __future__ import annotations

from types import CodeType

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final

__all__ = ["WRAPPER_CODES", "register_factories", "register_wrappers"]

#: Code objects of the functions that wrap a traced call or a hand-off.
WRAPPER_CODES: Final[set[CodeType]] = set()


def register_wrappers(*functions: Callable[..., Any]) -> None:
    """Register functions that are wrappers themselves."""
    WRAPPER_CODES.update(fn.__code__ for fn in functions)


def register_factories(*factories: Callable[..., Any]) -> None:
    """Register the functions defined inside each factory (not the factory: it only makes them)."""
    pending = [const for fn in factories for const in fn.__code__.co_consts]
    while pending:
        const = pending.pop()
        if isinstance(const, CodeType):
            WRAPPER_CODES.add(const)
            pending += const.co_consts

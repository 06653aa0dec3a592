"""The tracer's wrapper frames, known by their code objects rather than by file name.

More in docs/architecture.md, "tracer/_core/wrapper_frames.py".
"""

from __future__ import annotations

from types import CodeType

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final

__all__ = ["WRAPPER_CODES", "WRAPPER_IDS", "register_factories", "register_wrappers"]

#: Code objects of the functions that wrap a traced call or a hand-off.
WRAPPER_CODES: Final[set[CodeType]] = set()
#: The same code objects by ``id``: what a stack walk asks of every frame (the sampler's, many
#: times a second), where hashing a code object hashes its bytecode, names and constants anew.
#: The codes are kept alive here, so an id is never another code's.
WRAPPER_IDS: Final[dict[int, CodeType]] = {}


def _add(code: CodeType) -> None:
    WRAPPER_CODES.add(code)
    WRAPPER_IDS[id(code)] = code


def register_wrappers(*functions: Callable[..., Any]) -> None:
    """Register functions that are wrappers themselves."""
    for fn in functions:
        _add(fn.__code__)


def register_factories(*factories: Callable[..., Any]) -> None:
    """Register the functions defined inside each factory (not the factory: it only makes them)."""
    pending = [const for fn in factories for const in fn.__code__.co_consts]
    while pending:
        const = pending.pop()
        if isinstance(const, CodeType):
            _add(const)
            pending += const.co_consts

"""Traced code objects: which code is traced, under which method, and how its frames are seen.

Tracing instruments a function's *code*, not the function (DESIGN.md, "Instrumentation"): the
function stays the program's object, of the same type, with the same attributes and frames, and
every reference to it, taken before or after, runs traced code. ``REGISTRY`` maps each traced
code object to ``(method, kind)``; the event handlers (``tracer._core.hooks``, or the C
accelerator's) look the code up there. The backend that makes the code report its events is
``tracer._core.monitoring`` (``sys.monitoring``, Python 3.12+); where there is none, ``@traced``
falls back to a wrapper (``tracer._core.decorator``).

``TRACED_CODES`` holds the code objects the frames of traced calls run (on 3.12+ the function's
own code): a thread with one of them on its stack is inside a traced call (the sampler's
``only_active``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from types import CodeType, FunctionType
from typing import Any, Final, Protocol

#: The kinds of traced code: a plain call, a generator (or async generator), a coroutine.
SYNC: Final = 0
GENERATOR: Final = 1
COROUTINE: Final = 2

#: code object -> (method, kind), for every traced code.
REGISTRY: Final[dict[CodeType, tuple[int, int]]] = {}
#: The code objects that traced calls' frames run.
TRACED_CODES: Final[set[CodeType]] = set()
_lock = threading.Lock()


class Backend(Protocol):
    """What makes a code object report its events (``tracer._core.monitoring``)."""

    def attach(self, code: CodeType) -> bool: ...
    def detach(self, code: CodeType) -> None: ...


_backend: Backend | None = None
#: Makes the backend at the first instrumentation (nothing is claimed before anything is traced).
_factory: Callable[[], Backend | None] | None = None


def set_backend_factory(factory: Callable[[], Backend | None] | None) -> None:
    """How the backend is made, at the first instrumentation (None: no backend, wrap)."""
    global _factory
    _factory = factory


def _resolve() -> Backend | None:
    global _backend, _factory
    if _factory is not None:
        with _lock:
            if _factory is not None:
                factory, _factory = _factory, None
                _backend = factory()
    return _backend


def backend() -> Backend | None:
    """The backend that instruments code here, made now if it was not yet (None: wrappers)."""
    return _resolve()


def available() -> bool:
    """Whether code can be instrumented here (else functions are wrapped)."""
    return _resolve() is not None


def kind_of(code: CodeType) -> int:
    flags = code.co_flags
    if flags & (inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR):
        return GENERATOR
    if flags & (inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE):
        return COROUTINE
    return SYNC


def instrumentable(target: Any) -> bool:
    """A plain Python function whose code can be instrumented in place."""
    return isinstance(target, FunctionType) and _resolve() is not None


def is_traced(target: Any) -> bool:
    """Whether a function's code is traced."""
    code = getattr(target, "__code__", None)
    return isinstance(code, CodeType) and code in REGISTRY


def instrument(function: FunctionType, method: int) -> bool:
    """Trace every run of ``function``'s code under ``method``; False when the backend could not
    (the caller wraps instead). A code already traced keeps its first method."""
    backend = _resolve()
    if backend is None:
        return False
    code = function.__code__
    with _lock:
        if code in REGISTRY:
            return True
        REGISTRY[code] = (method, kind_of(code))
        TRACED_CODES.add(code)
        if backend.attach(code):
            return True
        del REGISTRY[code]
        TRACED_CODES.discard(code)
        return False


def uninstrument(function: FunctionType) -> None:
    """Stop tracing ``function``'s code (``tracer run``'s uninstall)."""
    code = function.__code__
    with _lock:
        if REGISTRY.pop(code, None) is None:
            return
        TRACED_CODES.discard(code)
        if _backend is not None:
            _backend.detach(code)


__all__ = [
    "COROUTINE",
    "GENERATOR",
    "REGISTRY",
    "SYNC",
    "TRACED_CODES",
    "available",
    "backend",
    "instrument",
    "instrumentable",
    "is_traced",
    "kind_of",
    "set_backend_factory",
    "uninstrument",
]

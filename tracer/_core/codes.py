"""Traced code objects: which code is traced, under which method, and how its frames are seen.

More in docs/architecture.md, "Instrumentation: code objects, not functions".
"""

from __future__ import annotations

import _thread
from types import CodeType, FunctionType

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final, Protocol

    class Backend(Protocol):
        """What makes a function's code report its events: ``tracer._core.monitoring`` (3.12+)
        or ``tracer._core.rewriting`` (3.11)."""

        def attach(self, function: FunctionType, method: int, kind: int) -> CodeType | None:
            """Instrument the function's code: the code its frames run now, or None if it
            cannot."""

        def detach(self, function: FunctionType) -> None:
            """Stop the function's code reporting (its frames run what they ran before attach)."""

        def untraced_code(self, running: CodeType) -> CodeType:
            """Code that runs as ``running`` does and reports nothing."""


#: The kinds of traced code: a plain call, a generator (or async generator), a coroutine.
SYNC: Final = 0
GENERATOR: Final = 1
COROUTINE: Final = 2

#: id(code) -> (method, kind) for every traced code: the code the handlers are called with (the
#: function's own). Tables are keyed by identity: a code object hashes its whole bytecode and
#: constants on every lookup (hundreds of ns), and compares by value (an untraced copy of traced
#: code is equal to it). ``_codes`` keeps every code listed here alive, so its id stays its own.
REGISTRY: Final[dict[int, tuple[int, int]]] = {}
#: id -> the code object, for the code objects that traced calls' frames run (the sampler's
#: ``only_active`` asks ``id(code) in TRACED_CODES``).
TRACED_CODES: Final[dict[int, CodeType]] = {}
_codes: dict[int, CodeType] = {}  # id -> the code, for REGISTRY's ids


def _runs_traced(code: CodeType) -> bool:
    return TRACED_CODES.get(id(code)) is code


_lock = _thread.allocate_lock()  # threading's Lock (threading loads with the first thread)


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


#: CPython's code flags, as ``inspect`` names them (a test checks them against it): read here
#: without importing ``inspect``, which ``import tracer`` does not load.
CO_VARARGS: Final = 0x04
CO_VARKEYWORDS: Final = 0x08
CO_GENERATOR: Final = 0x20
CO_COROUTINE: Final = 0x80
CO_ITERABLE_COROUTINE: Final = 0x100
CO_ASYNC_GENERATOR: Final = 0x200


def kind_of(code: CodeType) -> int:
    flags = code.co_flags
    if flags & (CO_GENERATOR | CO_ASYNC_GENERATOR):
        return GENERATOR
    if flags & (CO_COROUTINE | CO_ITERABLE_COROUTINE):
        return COROUTINE
    return SYNC


def instrumentable(target: Any) -> bool:
    """A plain Python function whose code can be instrumented in place."""
    return isinstance(target, FunctionType) and _resolve() is not None


def is_traced(target: Any) -> bool:
    """Whether a function runs traced code (``_runs_traced``, inline: a framework's integration
    asks it of every request's view)."""
    code = getattr(target, "__code__", None)
    return isinstance(code, CodeType) and TRACED_CODES.get(id(code)) is code


def instrument(function: FunctionType, method: int) -> bool:
    """Trace every run of ``function``'s code under ``method``; False when the backend could not
    (the caller wraps instead). A code already traced keeps its first method.

    The registry holds the function's own code (the key the handlers are called with) and the
    code its frames run once instrumented: the same object on 3.12+, an instrumented copy on
    3.11 (another function made by the same ``def`` is given the same copy)."""
    backend = _resolve()
    if backend is None:
        return False
    code = function.__code__
    with _lock:
        if _runs_traced(code):
            return True
        known = _codes.get(id(code)) is code
        entry = REGISTRY[id(code)] if known else (method, kind_of(code))
        running = backend.attach(function, *entry)
        if running is None:
            return False
        for listed in (code, running):
            REGISTRY[id(listed)] = entry
            _codes[id(listed)] = listed
        TRACED_CODES[id(running)] = running
        return True


_untraced_codes: dict[int, CodeType] = {}  # id of running code -> its untraced copy


def untraced(function: FunctionType) -> FunctionType:
    """A copy of a traced function that runs its code untraced (an integration that measures a
    call as an invocation of its own, an RQ job's, runs this instead); ``function`` itself when
    it is not traced. The copy has the function's names, defaults, closure and attributes."""
    running = function.__code__
    backend = _backend
    if not _runs_traced(running) or backend is None:
        return function
    code = _untraced_codes.get(id(running))
    if code is None:
        code = _untraced_codes.setdefault(id(running), backend.untraced_code(running))
    copy = FunctionType(
        code, function.__globals__, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = function.__qualname__
    copy.__module__ = function.__module__
    copy.__doc__ = function.__doc__
    copy.__dict__.update(function.__dict__)
    return copy


def uninstrument(function: FunctionType) -> None:
    """Stop tracing ``function``'s code (``tracer run``'s uninstall)."""
    with _lock:
        running = function.__code__
        if not _runs_traced(running) or _backend is None:
            return
        _backend.detach(function)
        del TRACED_CODES[id(running)]


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
    "untraced",
]

"""``@traced``, the public decorator: what it accepts (functions, methods, classmethods,
staticmethods, coroutines, generators, async generators) and how each is traced, once, at
decoration.

More in docs/architecture.md, "tracer/_core/traced.py".
"""

from __future__ import annotations

import os
import sys
import types

from tracer._core import accel, codes, recorder
from tracer._core.decorator import TRACED_MARK, is_traced, source, wrapper_for

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final, TypeVar, overload

    F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["traced"]


#: Set to 1 to wrap traced functions instead of instrumenting their code (for comparison, or
#: should instrumentation ever get in a program's way).
ENV_WRAP: Final = "INVOSEQ_WRAP"


def _backend() -> codes.Backend | None:
    """``sys.monitoring`` on 3.12+, instrumented copies of the code on 3.11, with the C
    accelerator's handlers or the pure-Python ones; none with ``INVOSEQ_WRAP=1`` (wrappers)."""
    from tracer._core import hooks, monitoring

    if os.environ.get(ENV_WRAP, "").strip() == "1":
        return None
    speedups = accel.speedups
    if monitoring.supported():
        return monitoring.claim(
            hooks if speedups is None else hooks.CHandlers(speedups, monitoring=True)
        )
    if sys.version_info[:2] == (3, 11):
        from tracer._core.rewriting import Rewriting

        return Rewriting(hooks if speedups is None else hooks.CHandlers(speedups, monitoring=False))
    return None


codes.set_backend_factory(_backend)


def _wrap(fn: Callable[..., Any], name: str | None) -> Callable[..., Any]:
    if is_traced(fn):
        return fn
    file, line = source(fn)
    module = str(getattr(fn, "__module__", None) or "<unknown>")
    qualname = str(name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn)))
    method = recorder.register_method(module, qualname, file, line)
    if codes.instrumentable(fn) and codes.instrument(fn, method):  # type: ignore[arg-type]
        return fn
    import functools

    wrapper = wrapper_for(fn, method)
    functools.update_wrapper(wrapper, fn)
    setattr(wrapper, TRACED_MARK, True)
    return wrapper


#: Methods that class creation makes classmethods of only when they are plain functions, which
#: the C wrapper is not: they are wrapped as classmethods here, whichever path runs.
_IMPLICIT_CLASSMETHODS: Final = frozenset({"__init_subclass__", "__class_getitem__"})


def _implicit_classmethod(target: Any) -> bool:
    if not isinstance(target, types.FunctionType) or target.__name__ not in _IMPLICIT_CLASSMETHODS:
        return False
    owner = target.__qualname__.rpartition(".")[0]  # "" at module level, "f.<locals>" in a body
    return bool(owner) and not owner.endswith("<locals>")


def _wrap_any(target: Any, name: str | None) -> Any:
    if _implicit_classmethod(target):
        wrapped = _wrap(target, name)
        return target if wrapped is target else classmethod(wrapped)
    if isinstance(target, staticmethod | classmethod):
        wrapped = _wrap(target.__func__, name)
        return target if wrapped is target.__func__ else type(target)(wrapped)
    if not callable(target):
        raise TypeError(
            f"@traced takes a function or method, not {type(target).__name__} {target!r}; "
            "to name the invocation, write @traced(name='...')"
        )
    if isinstance(target, type):
        raise TypeError(
            f"@traced decorates functions and methods, not the class {target.__qualname__}; "
            "decorate its methods, or use `tracer run --include` to trace a whole module"
        )
    return _wrap(target, name)


if TYPE_CHECKING:

    @overload
    def traced(fn: F, /) -> F: ...
    @overload
    def traced(*, name: str | None = None) -> Callable[[F], F]: ...


def traced(fn: Any = None, /, *, name: str | None = None) -> Any:
    """Trace every call of a function: ``@traced`` or ``@traced(name="checkout")``.

    Works on functions, methods, classmethods, staticmethods, coroutines, generators and async
    generators, keeping their name, docstring, signature and kind (``inspect`` sees through it)."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"traced(name=...) takes a string, not {type(name).__name__}")
    if fn is None:
        return lambda target: _wrap_any(target, name)
    return _wrap_any(fn, name)

"""``@traced``, the public decorator: what it accepts (functions, methods, classmethods,
staticmethods, coroutines, generators, async generators) and how each is wrapped, once, at
decoration; the wrappers themselves are ``tracer._core.decorator``'s."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, Final, TypeVar, overload

from tracer._core import recorder
from tracer._core.decorator import TRACED_MARK, source, wrapper_for

__all__ = ["traced"]

F = TypeVar("F", bound=Callable[..., Any])


def _wrap(fn: Callable[..., Any], name: str | None) -> Callable[..., Any]:
    if getattr(fn, TRACED_MARK, False):
        return fn
    file, line = source(fn)
    module = str(getattr(fn, "__module__", None) or "<unknown>")
    qualname = str(name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn)))
    method = recorder.register_method(module, qualname, file, line)
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
        return classmethod(_wrap(target, name))
    if isinstance(target, staticmethod):
        return staticmethod(_wrap(target.__func__, name))
    if isinstance(target, classmethod):
        return classmethod(_wrap(target.__func__, name))
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

"""What the server integrations of the asyncio frameworks share beyond ``_http``: the program's
view functions as traced children of the request, and anyio's worker threads started with no
context.

More in docs/architecture.md, "tracer/_patching/integrations/_endpoints.py".
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tracer._core import decorator, handoff, recorder
from tracer._patching.integrations import PatchSpec

MAX_WRAPPERS: Final = 4096
_DETACHED_MARK: Final = "__invoseq_detached__"

_wrappers: dict[Any, Callable[..., Any]] = {}


def endpoint(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a traced call of its own (module docstring); never raises."""
    try:
        found = _wrappers.get(fn)
        hashable = True
    except TypeError:  # a bound method of an unhashable object
        found, hashable = None, False
    if found is not None:
        return found
    wrapped = _wrap(fn)
    if hashable and len(_wrappers) < MAX_WRAPPERS:
        _wrappers[fn] = wrapped
    return wrapped


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if decorator.is_traced(target) or decorator.is_traced(fn):
        return fn
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        return fn
    try:
        wrapper = decorator.wrapper_for(fn, handoff.method_for(fn))
        functools.update_wrapper(wrapper, fn)
        setattr(wrapper, decorator.TRACED_MARK, True)
        return wrapper
    except Exception as exc:
        recorder.internal_error(exc)
        return fn


def detach_anyio_workers(module: ModuleType) -> list[PatchSpec]:
    """The hook of ``anyio._backends._asyncio``: its ``WorkerThread`` starts with no context."""
    worker = module.WorkerThread
    if not (isinstance(worker, type) and issubclass(worker, threading.Thread)):
        raise TypeError(f"anyio's WorkerThread is not a thread class: {worker!r}")
    return [(worker, "__init__", _detached_init)]


def _detached_init(original: Callable[..., None]) -> Callable[..., None]:
    if getattr(original, _DETACHED_MARK, False):  # the other integration patched it already
        return original

    @functools.wraps(original)
    def init(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        run = self.run

        def run_detached() -> None:
            run()

        setattr(run_detached, handoff.BOUND_MARK, True)  # the thread patch leaves it as it is
        self.run = run_detached  # type: ignore[method-assign]

    setattr(init, _DETACHED_MARK, True)
    return init

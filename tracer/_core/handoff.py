"""Hand-offs: work that leaves the current invocation for another thread or asyncio task.

More in docs/architecture.md, "tracer/_core/handoff.py".
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable
from typing import Any, Final

from invoseq.events import TAG_HANDOFF
from tracer._core import clock as clock_module
from tracer._core import context, decorator, forking, ids, recorder, stack, wrapper_frames

BOUND_MARK: Final = "__invoseq_bound__"
#: On a function that runs what it is given in a context it was given (an integration marks
#: asgiref's ``SyncToAsync.thread_handler``): ``bind`` leaves a callable built on it alone.
CARRIES_CONTEXT_MARK: Final = "__invoseq_carries_context__"

_get = context.current.get
_set = context.set_current
_reset = context.reset_current
_clock = clock_module.now
_lock = threading.RLock()  # reentrant: a finalizer may intern too (recorder._lock)
_methods: dict[tuple[str, str, str, int], int] = {}


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()


forking.on_fork("handoff", in_child=_after_fork_in_child)


def _unwrap(fn: Any) -> Any:
    """The function a callable stands for: through partials, Context.run and bound methods."""
    for _ in range(16):  # bounded: a partial of a partial of ...
        if isinstance(fn, functools.partial):
            inner = fn.func
            is_context_run = isinstance(getattr(inner, "__self__", None), contextvars.Context)
            fn = fn.args[0] if is_context_run and fn.args else inner
        elif hasattr(fn, "__func__"):
            fn = fn.__func__
        else:
            return fn
    return fn


def describe(fn: Any) -> tuple[str, str, str, int]:
    """(module, qualname, file, line) naming a callable, a coroutine object or a thread's run;
    a string is taken as the name itself (a remote call has no callable here)."""
    if isinstance(fn, str):
        return "", fn, "", 0
    target = _unwrap(fn)
    # The code of the function itself, not of a wrapper around it (a traced function's wrapper
    # is a closure in decorator.py, or C code with no code object at all).
    code = getattr(target, "cr_code", None)  # a coroutine object
    file, line = (code.co_filename, code.co_firstlineno) if code else decorator.source(target)
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None)
    frame = getattr(target, "cr_frame", None)
    if module is None and frame is not None:
        module = frame.f_globals.get("__name__")
    if module is None:
        module = type(target).__module__
    return str(module), str(qualname), file, line


def method_for(fn: Any) -> int:
    """The interned method id naming ``fn`` (interned once per distinct name)."""
    key = describe(fn)
    method = _methods.get(key)
    if method is None:
        with _lock:
            method = _methods.get(key)
            if method is None:
                method = _methods[key] = recorder.register_method(*key)
    return method


def record(kind: str, fn: Any, current: context.Value | None = None) -> context.Current | None:
    """Record a hand-off of ``fn`` from the current invocation (or from ``current``); return the
    context value for the other side, or None outside any sequence."""
    if current is None:
        current = stack.capture()
        if current is None:
            return None
    try:
        seq, parent = current[0], current[1]
        hid = ids.new_id63()
        method = method_for(fn)
        try:
            events = recorder.tls.events
        except AttributeError:
            events = recorder.register_thread()
        events.append((TAG_HANDOFF, hid, parent, kind, method, _clock(), seq))
        return (seq, parent, hid)
    except Exception as exc:
        recorder.internal_error(exc)
        return None


def _is_context_run(fn: Any) -> bool:
    return isinstance(getattr(fn, "__self__", None), contextvars.Context) or getattr(
        getattr(fn, "__func__", fn), CARRIES_CONTEXT_MARK, False
    )


def carries_context(fn: Any) -> bool:
    """Whether ``fn`` runs in a context it carries: ``ctx.run`` itself, a partial holding one, or
    a partial of a function marked ``CARRIES_CONTEXT_MARK`` (asgiref's ``sync_to_async`` hands its
    executor ``partial(thread_handler, ..., func, child)``, ``func`` entering a context copied
    when it was called). Its code runs under that context, exact already, so a hand-off of ours
    would only add an empty node beside it."""
    for _ in range(4):  # bounded: a partial of a partial of ...
        if _is_context_run(fn):
            return True
        if not isinstance(fn, functools.partial):
            return False
        if any(_is_context_run(arg) for arg in fn.args):
            return True
        fn = fn.func
    return False


def bind(
    fn: Callable[..., Any], kind: str = "thread", *, named_after: Any = None
) -> Callable[..., Any]:
    """``fn`` as it should run on the other side of a hop (``fn`` itself outside a sequence, or
    when it carries a context of its own: ``carries_context``).

    ``named_after`` is what the hand-off is named after when ``fn`` only runs it (a thread's
    ``run`` running its target)."""
    if getattr(fn, BOUND_MARK, False) or carries_context(fn):
        return fn
    target = fn if named_after is None else named_after
    value = record(kind, target)
    if value is None:
        return fn
    if decorator.is_traced(_unwrap(target)):
        runner = fn  # the traced function's own Start consumes the hand-off
    else:
        runner = decorator.wrap_with_method(fn, method_for(target))

    def run_handed_off(*args: Any, **kwargs: Any) -> Any:
        token = _set(stack.new_value(*value))  # set on this thread: exact here
        try:
            return runner(*args, **kwargs)
        finally:
            _reset(token)

    setattr(run_handed_off, BOUND_MARK, True)
    return run_handed_off


wrapper_frames.register_factories(bind)

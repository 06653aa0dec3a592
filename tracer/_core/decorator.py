"""The traced wrappers: start and end events around every call (``@traced`` itself, which picks
and applies them, is ``tracer._core.traced``).

More in docs/architecture.md, "The hot path" and "C accelerator".
"""

from __future__ import annotations

import sys
import types

from invoseq.events import TAG_ATTRS, TAG_END, TAG_ERROR, TAG_START
from tracer._core import accel as _accel
from tracer._core import adoption, budget, codes, context, ids, recorder, wrapper_frames
from tracer._core import clock as clock_module
from tracer._core import stack as stack_module

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable
    from typing import Any, Final

TRACED_MARK: Final = "__invoseq_traced__"
#: "c" when the C accelerator records events, "python" otherwise (INVOSEQ_PURE=1 forces it).
IMPLEMENTATION: Final = _accel.IMPLEMENTATION

# Bound once: the hot path reads module globals, never attributes of other modules.
_tls = recorder.tls
_register_thread = recorder.register_thread
_next_iid = recorder.next_iid
_internal_error = recorder.internal_error
_refill = budget.refill  # past the allowance: reserve more, or count the call as overflow
_new_seq = ids.new_seq
#: A root's context value when it joins a trace already current (OpenTelemetry's), else None.
_adopt: Callable[[], context.Current | None] = adoption.adopt
_get = context.current.get
#: The ContextVar's writes, which write nothing inside a cyclic collection before 3.12
#: (``context.set_current``): the C handlers keep the same rule.
_set = context.set_current
_reset = context.reset_current
_clock = clock_module.now
_ORIGIN_SYNC_ROOT: Final = stack_module.ORIGIN_SYNC_ROOT
_PAST_BOUND: Final = object()  # a call past the memory bound runs untraced (counted)
#: The token of an entry on top of a thread's stack (``tracer._core.hooks``) whose call the
#: memory bound turned away: a call that would root a sequence inside it is turned away too.
UNTRACED_CALL: Final = object()
_overflow_inside: Final = budget.overflow_inside_untraced

_disabled = False
_UNTRACED: context.Current = (b"", 0, 0)


set_max_buffered: Final = budget.configure  # the process's memory bound (the runtime sets it)


def is_traced(fn: Any) -> bool:
    """Whether ``fn`` is traced: its code instrumented (``tracer._core.codes``), or a wrapper."""
    return bool(getattr(fn, TRACED_MARK, False)) or codes.is_traced(fn)


def set_enabled(enabled: bool) -> None:
    """Turn recording on or off for every traced function (the runtime calls this)."""
    global _disabled
    _disabled = not enabled
    _sync_sources()


def recording() -> bool:
    """Whether traced functions record now (``otel``'s span processor follows the same switch)."""
    return not _disabled


def next_iid() -> int:
    """A new invocation id, from the same source as the traced calls' (tests may replace it)."""
    return _next_iid()


def now() -> int:
    """The tracer's clock (ns), the same source as the traced calls' (tests may replace it)."""
    return _clock()


#: The C accelerator's generator of sequence ids (ids.new_seq's layout, 25 ns against 170).
_drawn_seq: Final = ids.new_seq if _accel.speedups is None else _accel.speedups.new_seq


def new_seq() -> bytes:
    """A new sequence id, from the same source as the traced calls' roots (tests may replace
    it): a request or a task that starts a sequence."""
    return _drawn_seq() if _new_seq is ids.new_seq else _new_seq()


def _sync_sources() -> None:
    """Tell the C wrapper what the sources are now (None: its own, which are the defaults)."""
    speedups = _accel.speedups
    if speedups is None:
        return
    speedups.set_enabled(not _disabled)
    speedups.set_sources(
        clock=None if _clock is clock_module.now else _clock,
        new_seq=None if _new_seq is ids.new_seq else _new_seq,
        next_iid=None if _next_iid is recorder.next_iid else _next_iid,
        # The default adoption asks nothing before OpenTelemetry is loaded (no span can be
        # current), then only when its guard holds.
        adopt=None if _adopt is adoption.adopt and not adoption.loaded else _adopt,
        adopt_guard=adoption.GUARD if _adopt is adoption.adopt else None,
    )


_SOURCES: Final = frozenset({"_clock", "_new_seq", "_next_iid", "_adopt", "_disabled"})


class _Module(types.ModuleType):
    """This module's class: assigning a source from outside (``monkeypatch.setattr``) is passed
    on to the C wrapper, so tests that fix the clock or break the counter see both paths obey."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in _SOURCES:
            _sync_sources()


sys.modules[__name__].__class__ = _Module
adoption.on_loaded.append(_sync_sources)
_sync_sources()  # the C wrapper's roots adopt through the same callback


def _begin_c(method: int) -> tuple[int, Any]:
    value = _accel.speedups.start(method)  # type: ignore[union-attr]
    return (0, _UNTRACED) if value is None else (value[1], value)


def _begin_python(method: int) -> tuple[int, Any]:
    """A strand's invocation begins (coroutine, generator): its Start, with the exact parent, and
    (iid, the context value its steps run under: ``(seq, iid, 0, this thread)``); iid 0 past the
    memory bound, the call runs untraced (counted)."""
    try:
        events = _tls.events
    except AttributeError:
        events = _register_thread()
    current = _get()
    if current is None and inside_untraced_root(events.top):
        _overflow_inside()
        return 0, _UNTRACED
    if len(events) >= events.limit and not _refill(events, current):
        return 0, _UNTRACED
    iid = _next_iid()
    top = events.top
    if top[0] is current:
        seq = top[2]
        events.append((TAG_START, iid, top[1], 0, method, _clock(), seq))
    else:
        seq = _record_start(events, current, iid, method)
    return iid, (seq, iid, 0, events.ident)


_begin: Final = _begin_python if _accel.speedups is None else _begin_c


def _record_start(events: Any, current: Any, iid: int, method: int) -> Any:
    """The Start of an invocation that does not nest in the top of its thread's stack: a root's
    (it adopts a trace already current, or draws a sequence) or the first under a value a strand
    set (marked when that value makes its parent approximate). Its sequence id."""
    if current is None:
        adopted = _adopt()
        seq, parent, hid = (_new_seq(), 0, 0) if adopted is None else adopted
        events.append((TAG_START, iid, parent, hid, method, _clock(), seq))
        return seq
    seq = current[0]
    events.append((TAG_START, iid, current[1], current[2], method, _clock(), seq))
    if len(current) == 4 and (current[3] == _ORIGIN_SYNC_ROOT or current[3] != events.ident):
        events.append((TAG_ATTRS, iid, dict(stack_module.APPROXIMATE)))
    return seq


def inside_untraced_root(top: Any) -> bool:
    """Whether the top of a thread's stack is a call run untraced with no sequence around it: a
    call starting now with no context value would root a sequence of its own, of one call (the
    bound lets go as the sender delivers): it runs untraced too, counted, as the root did."""
    return len(top) > 5 and top[5] is UNTRACED_CALL


def _open(events: Any, current: Any, iid: int, method: int) -> Any:
    """A sync invocation that does not nest in the top of its thread's stack: its Start, and it
    becomes the top; a root sets the ContextVar (the token is returned)."""
    if current is not None:
        events.top = (current, iid, _record_start(events, current, iid, method))
        return None
    adopted = _adopt()
    seq, parent, hid = (_new_seq(), 0, 0) if adopted is None else adopted
    current = (seq, iid, 0, _ORIGIN_SYNC_ROOT)
    token = _set(current)
    try:
        events.append((TAG_START, iid, parent, hid, method, _clock(), seq))
    except BaseException:
        _reset(token)  # nothing of a failed start stays behind
        raise
    events.top = (current, iid, seq)
    return token


def _end(iid: int) -> None:
    try:
        events = _tls.events
    except AttributeError:
        events = _register_thread()
    events.append((TAG_END, iid, _clock()))


def _fail(iid: int, exc: BaseException) -> None:
    try:
        events = _tls.events
    except AttributeError:
        events = _register_thread()
    events.append((TAG_ERROR, iid, _clock(), type(exc).__name__[:1024]))


def _wrap_sync(fn: Callable[..., Any], method: int) -> Callable[..., Any]:
    if _accel.speedups is not None:
        wrapper: Callable[..., Any] = _accel.speedups.TracedFunction(fn, method)
        return wrapper
    return _shaped("SYNC", "traced_call", fn, method)


def _wrap_coroutine(fn: Callable[..., Any], method: int) -> Callable[..., Any]:
    return _shaped("COROUTINE", "traced_coroutine", fn, method, kind="async def")


def _wrap_generator(fn: Callable[..., Any], method: int) -> Callable[..., Any]:
    return _shaped("GENERATOR", "traced_generator", fn, method)


def _wrap_async_generator(fn: Callable[..., Any], method: int) -> Callable[..., Any]:
    return _shaped("ASYNC_GENERATOR", "traced_async_generator", fn, method, kind="async def")


def _shaped(
    body: str, name: str, fn: Callable[..., Any], method: int, *, kind: str = "def"
) -> Callable[..., Any]:
    """A Python wrapper of ``fn`` whose body is ``wrapper_bodies.<body>``: the wrapper compiler
    loads with the first (with the C accelerator, sync calls are wrapped in C and code is
    instrumented, so most programs never load it)."""
    from tracer._core import wrapper_bodies, wrapper_shapes

    return wrapper_shapes.make(
        getattr(wrapper_bodies, body), name, globals(), fn, method, kind=kind
    )


async def _close_async(inner: AsyncGenerator[Any, Any], iid: int, value: Any) -> None:
    token = _set(value) if iid else None
    try:
        await inner.aclose()
    except BaseException as exc:
        if iid:
            _fail(iid, exc)
        raise
    finally:
        if token is not None:
            _reset(token)
    if iid:
        _end(iid)


wrapper_frames.register_wrappers(_close_async)


def wrap_with_method(fn: Callable[..., Any], method: int) -> Callable[..., Any]:
    """A sync call wrapper for an already-interned method (hand-off runners)."""
    return _wrap_sync(fn, method)


def wrapper_for(fn: Callable[..., Any], method: int) -> Callable[..., Any]:
    """The wrapper of ``fn``'s shape (sync, coroutine, generator, async generator), chosen now,
    at decoration, never per call."""
    import inspect  # at decoration of what is no plain function (codes instrument those)

    if inspect.isasyncgenfunction(fn):
        return _wrap_async_generator(fn, method)
    if inspect.iscoroutinefunction(fn):
        return _wrap_coroutine(fn, method)
    if inspect.isgeneratorfunction(fn):
        return _wrap_generator(fn, method)
    return _wrap_sync(fn, method)


def _unwrap(fn: Any) -> Any:
    """``inspect.unwrap``: through ``__wrapped__`` to the innermost function (a cycle stops)."""
    seen = {id(fn)}
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
        if id(fn) in seen:
            break
        seen.add(id(fn))
    return fn


def source(fn: Callable[..., Any]) -> tuple[str, int]:
    """(file, first line) of the function's own code, through any wrappers; ("", 0) without."""
    code = getattr(_unwrap(fn), "__code__", None)
    if code is None:
        return "", 0
    return code.co_filename, code.co_firstlineno

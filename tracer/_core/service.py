"""Service sequences: what a process does to serve, not a request it serves (an ASGI lifespan, a
server loading its application, an import at the top). They are roots of their own, named under
``invoseq.service``, which ``cmr ls`` leaves out unless asked.

More in docs/architecture.md, "tracer/_core/service.py".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from invoseq.events import SERVICE_MODULE
from tracer._core import context, decorator, measured, recorder, stack

T = TypeVar("T")

_set: Final = context.set_current
_reset: Final = context.reset_current


def begin(name: str, *, opened: bool = True) -> measured.Measured | None:
    """A service invocation named ``name`` (``"asgi.lifespan"``), rooting a new sequence, opened
    now unless ``opened`` is False; None when not recording (never raises)."""
    try:
        token = _set(None)
        try:
            call = measured.begin()
        finally:
            _reset(token)
        if call is not None:
            call.uncount()  # no request: an event loop serving only it is idle
        if call is not None and opened:
            call.open(method(name))
        return call
    except Exception as exc:
        recorder.internal_error(exc)
        return None


def method(name: str) -> int:
    return measured.method(SERVICE_MODULE, name)


def finish(call: measured.Measured, name: str, exc: BaseException | None = None) -> None:
    """End ``call`` (opened now if it was not), as an error when ``exc`` ended it."""
    try:
        call.finish(method(name), None, error=None if exc is None else type(exc).__name__)
    except Exception as error:
        recorder.internal_error(error)


def run(name: str, work: Callable[[], T]) -> T:
    """``work()`` as the service invocation ``name``: what it calls nests under it. Written
    only when something traced ran meanwhile, or it raised (its Start then comes at its end,
    with the time it began: the repository places it whenever it arrives)."""
    call = begin(name, opened=False)
    return work() if call is None else _run_under(call, name, work, errors_kept=True)


def run_at_top(name: str, work: Callable[[], T]) -> T:
    """``work()`` as the service invocation ``name`` when no invocation is current on this
    thread (an import the program makes at start-up), else within what is current (a lazy
    import inside a request is that request's work).

    Nothing is touched before the work has run but the ContextVar: no thread registered, so
    the tracer's own start-up (whose imports come through here) never starts it again. The
    invocation is written afterwards, and only when a traced call of this thread may have
    nested under it (an id was drawn since, and this thread has recorded): an import that
    fails having called nothing traced (an optional dependency missing) leaves nothing. The
    ids are the process's: a traced call another thread began meanwhile leaves an import that
    called nothing as a service sequence of its one call."""
    try:
        if not decorator.recording() or stack.active():
            return work()
        call = measured.Measured(decorator.new_seq(), 0, 0, decorator.next_iid(), decorator.now())
    except Exception as exc:
        recorder.internal_error(exc)
        return work()
    return _run_under(call, name, work, errors_kept=False)


def _run_under(
    call: measured.Measured, name: str, work: Callable[[], T], *, errors_kept: bool
) -> T:
    token = _set(call.value)
    try:
        result = work()
    except BaseException as exc:
        _reset(token)
        _finish_unless_empty(call, name, exc, errors_kept)
        raise
    _reset(token)
    _finish_unless_empty(call, name, None, errors_kept)
    return result


def _finish_unless_empty(
    call: measured.Measured, name: str, exc: BaseException | None, errors_kept: bool
) -> None:
    """``finish``, unless this thread never recorded, or no invocation of any thread began
    since ``call`` did (ids come from one counter; one is spent here) and it did not raise or
    ``errors_kept`` is False: a start-up that ran nothing traced leaves no sequence."""
    try:
        if getattr(recorder.tls, "events", None) is None:
            return
        if decorator.next_iid() == call.iid + 1 and (exc is None or not errors_kept):
            return
    except Exception as error:
        recorder.internal_error(error)
    finish(call, name, exc)


async def run_async(name: str, work: Callable[[], Awaitable[T]]) -> T:
    """``run`` for a coroutine: the service invocation ends when it returns or raises."""
    call = begin(name)
    if call is None:
        return await work()
    token = _set(call.value)
    try:
        result = await work()
    except BaseException as exc:
        _reset(token)
        finish(call, name, exc)
        raise
    _reset(token)
    finish(call, name)
    return result

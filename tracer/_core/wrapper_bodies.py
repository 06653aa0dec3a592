"""The bodies of the pure-Python wrappers of sync functions and coroutines, compiled by
``tracer._core.wrapper_shapes`` with the wrapped function's own parameters, in the namespace of
``tracer._core.decorator``: they read its globals (``_disabled``, the sources, ``_open``,
``_begin``, ...), so a source replaced there reaches every wrapper. ``{call}`` is the call of
the function, ``_ivq_0`` the interned method; every other name of theirs starts with ``_ivq_``.
Event tags are written as numbers (``invoseq.wire``: Start 0, End 1, Error 2).
"""

from __future__ import annotations

from invoseq.events import TAG_END, TAG_ERROR, TAG_START

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final

#: The sync wrapper's body (``tracer._core.wrapper_shapes`` gives it the function's own
#: parameters). Inlined: this is the path every traced call takes. A call nested in the top of its
#: thread's stack (the same strand) becomes the top, keeps the one below in ``_ivq_top``, and
#: touches no ContextVar; anything else (a root, the first call of a strand) takes ``_open``.
SYNC: Final = """\
if _disabled:
    return {call}
try:
    try:
        _ivq_events = _tls.events
    except AttributeError:
        _ivq_events = _register_thread()
    _ivq_current = _get()
    if len(_ivq_events) >= _ivq_events.limit and not _refill(_ivq_events, _ivq_current):
        _ivq_token = _PAST_BOUND  # untraced, counted with its sequence
    else:
        _ivq_iid = _next_iid()
        _ivq_top = _ivq_events.top
        if _ivq_top[0] is _ivq_current:
            _ivq_seq = _ivq_top[2]
            _ivq_events.append((0, _ivq_iid, _ivq_top[1], 0, _ivq_0, _clock(), _ivq_seq))
            _ivq_events.top = (_ivq_current, _ivq_iid, _ivq_seq)
            _ivq_token = None
        elif _ivq_current is None and inside_untraced_root(_ivq_top):
            _overflow_inside()  # a root inside an untraced one: untraced too, counted
            _ivq_token = _PAST_BOUND
        else:
            _ivq_token = _open(_ivq_events, _ivq_current, _ivq_iid, _ivq_0)
except Exception as _ivq_exc:
    _internal_error(_ivq_exc)
    return {call}
if _ivq_token is _PAST_BOUND:
    if _ivq_current is not None:
        return {call}
    # an untraced root: the calls inside it run untraced too (decorator.inside_untraced_root)
    _ivq_top = _ivq_events.top
    _ivq_events.top = (_ivq_top[0], _ivq_top[1], _ivq_top[2], None, _ivq_top, UNTRACED_CALL)
    try:
        return {call}
    finally:
        _ivq_events.top = _ivq_top
try:
    _ivq_result = {call}
except BaseException as _ivq_exc:
    try:
        _ivq_events.top = _ivq_top
        try:
            _ivq_events.append((2, _ivq_iid, _clock(), type(_ivq_exc).__name__[:1024]))
        finally:
            if _ivq_token is not None:
                _reset(_ivq_token)
    except Exception as _ivq_inner:
        _internal_error(_ivq_inner)
    raise
try:
    _ivq_events.top = _ivq_top
    try:
        _ivq_events.append((1, _ivq_iid, _clock()))
    finally:
        if _ivq_token is not None:
            _reset(_ivq_token)
except Exception as _ivq_inner:
    _internal_error(_ivq_inner)
return _ivq_result
"""


#: The coroutine wrapper's body: the invocation is the whole ``await``; its steps run under its
#: own context value, set once (the task's context keeps it between steps).
COROUTINE: Final = """\
if _disabled:
    return await {call}
try:
    _ivq_iid, _ivq_value = _begin(_ivq_0)
    _ivq_token = _set(_ivq_value) if _ivq_iid else None
except Exception as _ivq_exc:
    _internal_error(_ivq_exc)
    return await {call}
if _ivq_token is None:
    return await {call}
try:
    _ivq_result = await {call}
except BaseException as _ivq_exc:
    try:
        _fail(_ivq_iid, _ivq_exc)
        _reset(_ivq_token)
    except Exception as _ivq_inner:
        _internal_error(_ivq_inner)
    raise
try:
    _end(_ivq_iid)
    _reset(_ivq_token)
except Exception as _ivq_inner:
    _internal_error(_ivq_inner)
return _ivq_result
"""

#: The generator wrapper's body. The invocation starts when the generator first runs and ends
#: when it is exhausted, raises or is closed. Each resumption runs inside the invocation's
#: context, and the caller's context is restored before every yield, so calls made between
#: iterations belong to the caller.
GENERATOR: Final = """\
_ivq_inner = {call}
if _disabled:
    return (yield from _ivq_inner)
try:
    _ivq_iid, _ivq_value = _begin(_ivq_0)
except Exception as _ivq_exc:
    _internal_error(_ivq_exc)
    _ivq_iid = 0
if not _ivq_iid:
    return (yield from _ivq_inner)
_ivq_send = None
_ivq_throw = None
while True:
    _ivq_token = _set(_ivq_value)
    try:
        if _ivq_throw is None:
            _ivq_item = _ivq_inner.send(_ivq_send)
        else:
            _ivq_item = _ivq_inner.throw(_ivq_throw)
    except StopIteration as _ivq_stop:
        _end(_ivq_iid)
        return _ivq_stop.value
    except BaseException as _ivq_exc:
        _fail(_ivq_iid, _ivq_exc)
        raise
    finally:
        _reset(_ivq_token)
    try:
        _ivq_send, _ivq_throw = (yield _ivq_item), None
    except GeneratorExit:
        _ivq_token = _set(_ivq_value)
        try:
            _ivq_inner.close()
        except BaseException as _ivq_exc:
            _fail(_ivq_iid, _ivq_exc)
            raise
        finally:
            _reset(_ivq_token)
        _end(_ivq_iid)
        raise
    except BaseException as _ivq_exc:
        _ivq_send, _ivq_throw = None, _ivq_exc
"""

#: The async generator wrapper's body: as the generator's; an untraced run (disabled, or a
#: tracer failure) takes the same loop so ``asend``/``athrow``/``aclose`` always reach the
#: user's generator.
ASYNC_GENERATOR: Final = """\
_ivq_inner = {call}
_ivq_iid, _ivq_value = 0, _UNTRACED
if not _disabled:
    try:
        _ivq_iid, _ivq_value = _begin(_ivq_0)
    except Exception as _ivq_exc:
        _internal_error(_ivq_exc)
_ivq_send = None
_ivq_throw = None
while True:
    _ivq_token = _set(_ivq_value) if _ivq_iid else None
    try:
        if _ivq_throw is None:
            _ivq_item = await _ivq_inner.asend(_ivq_send)
        else:
            _ivq_item = await _ivq_inner.athrow(_ivq_throw)
    except BaseException as _ivq_exc:
        if _ivq_iid:
            if isinstance(_ivq_exc, StopAsyncIteration):
                _end(_ivq_iid)
            else:
                _fail(_ivq_iid, _ivq_exc)
        if isinstance(_ivq_exc, StopAsyncIteration):
            return
        raise
    finally:
        if _ivq_token is not None:
            _reset(_ivq_token)
    try:
        _ivq_send, _ivq_throw = (yield _ivq_item), None
    except GeneratorExit:
        await _close_async(_ivq_inner, _ivq_iid, _ivq_value)
        raise
    except BaseException as _ivq_exc:
        _ivq_send, _ivq_throw = None, _ivq_exc
"""

assert (TAG_START, TAG_END, TAG_ERROR) == (0, 1, 2)  # as the bodies write them

__all__ = ["ASYNC_GENERATOR", "COROUTINE", "GENERATOR", "SYNC"]

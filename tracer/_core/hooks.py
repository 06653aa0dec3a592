"""The events of an instrumented code object, in pure Python: what happens when a traced
function's own frame starts, yields, resumes, returns or unwinds.

More in docs/architecture.md, "tracer/_core/hooks.py".
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, Final

from tracer._core import codes, context, recorder
from tracer._core import decorator as _d

_tls: Final = recorder.tls
_register_thread: Final = recorder.register_thread
_internal_error: Final = recorder.internal_error
_registry: Final = codes.REGISTRY
_getframe: Final = sys._getframe
_getrefcount: Final = sys.getrefcount
_NOT_WRITTEN: Final = context.NOT_WRITTEN  # a write left out inside a collection

#: A strand's state, by its frame. The pure-Python handlers' table is a dict of [iid, context
#: value, token of the running step or None, its Start's buffer, the value set inside its frame
#: that was in effect when it last yielded or None, None]; the C handlers' a
#: ``_speedups.StrandTable`` (``CHandlers``) of ``_speedups.Strand`` (its ``iid`` and
#: ``buffer``), which the sweep reads as it reads the dict.
_strands: Any = {}
_sweep_at = 64  # sweep when this many strands are open
#: The strands turned away as roots past the memory bound (pure Python; the C handlers keep the
#: same table): [the buffer of the step running, the top below its marker] (None: not running).
_untraced_strands: dict[FrameType, list[Any]] = {}
#: The token of a synchronous call that runs untraced: its end records nothing.
_UNTRACED: Final = object()
#: The token of a call the memory bound turned away: a root inside it is turned away too.
_PAST_BOUND: Final = _d.UNTRACED_CALL


#: The synchronous handlers' source, compiled in ``tracer._core.decorator``'s namespace as its
#: wrapper bodies are (``tracer._core.wrapper_bodies``): they read its globals (``_disabled``,
#: ``_clock``, ``_next_iid``, ``_get``, ``_refill``, ``_open``, ``_reset``, ...) directly, so a
#: source a test replaces there reaches them, and a call costs no attribute lookup. A return or
#: unwind whose code is the top entry's is a synchronous call's (strands push no entry): no lookup
#: at all.
#:
#: The start, written once (``{name}``, ``{find}`` the lines that find ``method``): the handler
#: ``sys.monitoring`` calls finds it in the registry, the one a 3.11 copy of sync code embeds is
#: made for that code (``start_for``) and has it already.
_START_HANDLER: Final = """\
def {name}(code, offset):
    try:
{find}\
        try:
            events = _tls.events
        except AttributeError:
            events = _register_thread()
        top = events.top
        if _disabled:
            events.top = (top[0], top[1], top[2], code, top, _HOOK_UNTRACED)
            return
        current = _get()
        if len(events) >= events.limit and not _refill(events, current):
            # untraced, counted with its sequence
            events.top = (top[0], top[1], top[2], code, top, _HOOK_PAST_BOUND)
            return
        iid = _next_iid()
        if top[0] is current:
            seq = top[2]
            events.append((0, iid, top[1], 0, method, _clock(), seq))
            events.top = (current, iid, seq, code, top, None)
        elif current is None and _hook_inside_untraced_root(top):
            _overflow_inside()  # a root inside an untraced one: untraced too, counted
            events.top = (top[0], top[1], top[2], code, top, _HOOK_PAST_BOUND)
        else:
            events.top = (top[0], top[1], top[2], code, top, _HOOK_UNTRACED)  # should _open fail
            token = _open(events, current, iid, method)
            opened = events.top
            events.top = (opened[0], iid, opened[2], code, top, token)
    except Exception as exc:
        _internal_error(exc)
"""

_FIND_IN_REGISTRY: Final = """\
        try:
            method, kind = _hook_registry[id(code)]
        except KeyError:
            return
        if kind:
            _hook_start_strand(method, _hook_getframe(1))
            return
"""

_OTHER_END: Final = """\
def _hook_other_end(code, error):
    # not the top entry's code: a strand's end, or untraced code, or a frame begun before its
    # code was traced (left alone)
    entry = _hook_registry.get(id(code))
    if entry is not None and entry[1]:  # the strand's frame: this one's caller's caller
        _hook_finish_strand(entry[1], error, _hook_getframe(2))
"""


def _start_strand(method: int, frame: FrameType) -> None:
    if _d._disabled:
        return
    if len(_strands) >= _sweep_at:
        sweep()
    iid, value = _d._begin(method)
    if not iid:
        if _d._get() is None:  # a root turned away (counted): so are the calls of its steps
            if len(_untraced_strands) >= _sweep_at:
                sweep()
            state = _untraced_strands[frame] = [None, None]
            _untraced_step(state)
        return
    state = [iid, value, None, _tls.events, None, None]
    _strands[frame] = state
    state[2] = _d._set(value)


def _untraced_step(state: list[Any]) -> None:
    """A step of a strand turned away as a root begins: a marker on top of its thread's stack
    (it may resume on a thread that has recorded nothing yet)."""
    try:
        events = _tls.events
    except AttributeError:
        events = _register_thread()
    top = events.top
    events.top = (top[0], top[1], top[2], None, top, _PAST_BOUND)
    state[0], state[1] = events, top


def _untraced_step_end(state: list[Any]) -> None:
    if state[1] is not None:
        state[0].top, state[0], state[1] = state[1], None, None


def _finish_strand(kind: int, error: BaseException | None, frame: FrameType) -> None:
    state = _strands.pop(frame, None)
    if state is None:
        untraced = _untraced_strands.pop(frame, None) if _untraced_strands else None
        if untraced is not None:
            _untraced_step_end(untraced)
        return
    token = state[2]
    try:
        if error is None or (kind == codes.GENERATOR and isinstance(error, GeneratorExit)):
            _d._end(state[0])
        else:
            _d._fail(state[0], error)
    finally:
        if token is not None:
            _d._reset(token)


#: A synchronous call's end, written once for the return and the unwind (``{name}``,
#: ``{parameter}`` the event's value, ``{error}`` what a strand's end is given, ``{event}`` the
#: record appended): two functions rather than one with a flag, so each end is one call.
_END_HANDLER: Final = """\
def {name}(code, offset, {parameter}):
    try:
        try:
            events = _tls.events
            top = events.top
            mine = top[3] is code
        except (AttributeError, IndexError):  # no buffer yet; the top of a wrapper, or none
            mine = False
        if not mine:
            _hook_other_end(code, {error})
            return
        events.top = top[4]
        token = top[5]
        if token is None:
            events.append({event})
        elif token is not _HOOK_UNTRACED and token is not _HOOK_PAST_BOUND:
            try:
                events.append({event})
            finally:
                _reset(token)
    except Exception as exc:
        _internal_error(exc)
"""


def _compile_sync_handlers() -> tuple[Any, Any, Any, Any]:
    namespace = vars(_d)
    namespace.update(
        _hook_registry=_registry,
        _hook_getframe=_getframe,
        _hook_start_strand=_start_strand,
        _hook_finish_strand=_finish_strand,
        _HOOK_UNTRACED=_UNTRACED,
        _HOOK_PAST_BOUND=_PAST_BOUND,
        _hook_inside_untraced_root=_d.inside_untraced_root,
    )
    start_for_sync = _START_HANDLER.format(name="_hook_start_sync", find="")
    source = "\n\n".join(
        (
            _START_HANDLER.format(name="_hook_start", find=_FIND_IN_REGISTRY),
            "def _hook_start_for(method):\n"
            + textwrap.indent(start_for_sync, "    ")
            + "    return _hook_start_sync\n",
            _OTHER_END,
            _END_HANDLER.format(
                name="_hook_return", parameter="value", error="None", event="(1, top[1], _clock())"
            ),
            _END_HANDLER.format(
                name="_hook_unwind",
                parameter="error",
                error="error",
                event="(2, top[1], _clock(), type(error).__name__[:1024])",
            ),
        )
    )
    exec(compile(source, "<invoseq handlers>", "exec"), namespace)
    return (
        namespace["_hook_start"],
        namespace["_hook_start_for"],
        namespace["_hook_return"],
        namespace["_hook_unwind"],
    )


start, _start_for_sync, return_, unwind = _compile_sync_handlers()


def start_for(method: int, kind: int) -> Callable[[object, int], None]:
    """The start handler an instrumented copy of one code object calls (3.11, ``tracer._core.
    rewriting``): for sync code, one made for its method, which reads no registry; else
    ``start``."""
    return _start_for_sync(method) if kind == codes.SYNC else start  # type: ignore[no-any-return]


def yield_(code: CodeType, offset: int, value: object) -> None:
    try:
        state = _strands.get(_getframe(1))
        if state is not None and state[2] is not None:
            now = _d._get()
            token, state[2] = state[2], None
            if token is not _NOT_WRITTEN:  # (a step inside a collection set nothing: as it was)
                _d._reset(token)
                # a value code inside the frame set and has not reset (an integration's call in
                # progress across the await): the step that resumes runs under it, not over it
                state[4] = None if now is state[1] else now
        elif state is None and _untraced_strands:
            untraced = _untraced_strands.get(_getframe(1))
            if untraced is not None:
                _untraced_step_end(untraced)
    except Exception as exc:
        _internal_error(exc)


def resume(code: CodeType, offset: int, depth: int = 1) -> None:
    """A step of a strand begins: resumed (``depth`` 1: the strand's frame called this), or a
    throw into it (``throw``, the frame one further out)."""
    try:
        frame = _getframe(depth)
        state = _strands.get(frame)
        if state is not None and state[2] is None:
            state[2] = _d._set(state[1] if state[4] is None else state[4])
        elif state is None and _untraced_strands:
            untraced = _untraced_strands.get(frame)
            if untraced is not None and untraced[1] is None:
                _untraced_step(untraced)
    except Exception as exc:
        _internal_error(exc)


def throw(code: CodeType, offset: int, error: BaseException) -> None:
    """A throw into a suspended strand (``generator.throw``, and ``close``: its finally, its
    except clauses) begins a step as a resume does."""
    if id(code) in _registry:
        resume(code, offset, 2)


def _items(table: Any) -> list[tuple[Any, Any]]:
    """``table``'s items, listed. Before 3.12 a collection may start at any allocation while the
    list is made, and the finalizers it runs (a traced generator's close) take strands out of
    the table, which stops the listing: it is made again (at most a few times; else nothing is
    swept this time)."""
    for _ in range(8):
        try:
            return list(table.items())
        except RuntimeError:  # changed size during iteration
            continue
    return []


def sweep() -> None:
    """End the strands whose frame only this table holds (closed with no event, or dropped):
    they end ok, now, in the buffer of their Start; and sweep next when twice as many are open.
    Any thread may sweep (the sender does before each drain): appends are atomic."""
    global _sweep_at
    for frame, state in _items(_strands):
        if frame.__class__ is int:  # the C table's key on 3.11: every close runs a handler
            continue
        # the table's key, the items() list's tuple, the loop's name and getrefcount's argument
        if _getrefcount(frame) <= 4 and _strands.pop(frame, None) is state:
            if state.__class__ is list:
                state[3].append((1, state[0], _d._clock()))
            else:
                state.buffer.append((1, state.iid, _d._clock()))
    for frame, state in _items(_untraced_strands):
        if _getrefcount(frame) <= 4 and state[1] is None:  # nothing to record: forgotten
            _untraced_strands.pop(frame, None)
    _sweep_at = max(64, 2 * max(len(_strands), len(_untraced_strands)))


recorder.before_drain.append(sweep)


class CHandlers:
    """The handlers with the C accelerator: the same events, in C; the strands' table is this
    module's, and so is its sweep. ``sys.monitoring`` (3.12+) calls the ``hook_*`` objects,
    whose vectorcall is the handler itself (a builtin function's call costs a recursion check
    more: 6 to 25 ns a traced call here); the instrumented bytecode (3.11) calls the
    ``monitor_*`` builtin functions, which its specialised call instruction calls faster."""

    def __init__(self, speedups: Any, *, monitoring: bool) -> None:
        global _strands
        if not isinstance(_strands, speedups.StrandTable):
            _strands = speedups.StrandTable()
        speedups.set_handlers(_strands, sweep, _untraced_strands)
        prefix = "hook_" if monitoring else "monitor_"
        self.mark = speedups.mark_code
        self.start = getattr(speedups, prefix + "start")
        self.return_ = getattr(speedups, prefix + "return")
        self.unwind = getattr(speedups, prefix + "unwind")
        self.yield_ = getattr(speedups, prefix + "yield")
        self.resume = getattr(speedups, prefix + "resume")
        self.throw = getattr(speedups, prefix + "throw")


__all__ = [
    "CHandlers",
    "resume",
    "return_",
    "start",
    "start_for",
    "sweep",
    "throw",
    "unwind",
    "yield_",
]

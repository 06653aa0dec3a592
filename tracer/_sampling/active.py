"""Which threads the sampler reads when only active ones are (``only_active``, the default):
those inside a traced call, or in an asyncio event loop between the steps of its tasks while the
loop has work open (``open_async_work``: a request in flight, a traced coroutine suspended).

More in docs/architecture.md, "tracer/_sampling/active.py".
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from types import CodeType, FrameType
from typing import Any, Final

from tracer._core import measured, service
from tracer._core.codes import TRACED_CODES
from tracer._core.wrapper_frames import WRAPPER_IDS

#: Frames walked from a thread's innermost one, at most (here and in the stacks sampled).
MAX_DEPTH: Final = 512
#: Tasks looked into for a suspended traced coroutine, at most: past it, the loop has work open.
MAX_TASKS_SCANNED: Final = 256
#: How long a verdict of ``open_async_work`` holds (one tick reads it for every thread).
VERDICT_NS: Final = 2_000_000


def worth_sampling(top: FrameType, frames: list[FrameType] | None = None) -> bool:
    """Whether a thread seen at ``top`` is sampled when only active threads are: inside a traced
    call, or in an asyncio event loop itself (not in a callback or task step it runs) whose loop
    no traced call holds, while it has work open (``open_async_work``): between the steps of its
    tasks, traced ones among them perhaps (suspended, a traced coroutine leaves no frame on the
    stack), which the repository tells.

    A loop that iterates in C (uvloop) runs no Python frame of its own: between task steps the
    thread's innermost frame is ``asyncio.Runner.run`` (``asyncio.run``, ``uvloop.run``), which
    otherwise only calls the loop. Seen there, the thread is in its loop; in a step or callback
    such a loop runs, the step's frames are above it, as they are in any callback.

    ``frames``: when it is worth sampling, the stack's frames from ``top`` outwards are put there
    (at most ``MAX_COLLECTED``), so that the sampler walks the stack once, not twice.

    Codes are looked up by ``id``: hashing a code object, as a set of codes would, hashes its
    bytecode, names and constants (nested functions' codes too) for every frame of every tick."""
    loop = _loop_codes()
    if loop is not None and top.f_code is loop[2]:
        return _collected(open_async_work(), top, frames)
    in_callback = False
    wrappers, traced = WRAPPER_IDS, TRACED_CODES
    frame: FrameType | None = top
    depth = 0
    while frame is not None and depth < MAX_DEPTH:
        code = frame.f_code
        if id(code) in wrappers or id(code) in traced:
            return _collected(True, frame, frames)
        if frames is not None:
            frames.append(frame)
        if loop is not None:
            if code is loop[1]:
                in_callback = True
            elif code is loop[0] and not in_callback:
                return _collected(open_async_work(), frame.f_back, frames)
        frame = frame.f_back
        depth += 1
    return False


#: The frames ``worth_sampling`` collects for a stack, at most: the sampler keeps ``MAX_DEPTH``
#: of them, the tracer's own frames (a wrapper's in pure Python) left out.
MAX_COLLECTED: Final = 4 * MAX_DEPTH


def _collected(worth: bool, frame: FrameType | None, frames: list[FrameType] | None) -> bool:
    """``worth``; when it is, the rest of the stack from ``frame`` outwards put in ``frames``."""
    if worth and frames is not None:
        while frame is not None and len(frames) < MAX_COLLECTED:
            frames.append(frame)
            frame = frame.f_back
    return worth


def in_event_loop(top: FrameType) -> bool:
    """Whether a thread seen at ``top`` runs an asyncio event loop, in a callback or not: while
    the loop has work open its tasks may be suspended in traced coroutines, which leave no frame
    and record nothing when they resume, so the sampler does not go idle beside it
    (``Sampler._park``)."""
    loop = _loop_codes()
    if loop is None:
        return False
    frame: FrameType | None = top
    depth = 0
    while frame is not None and depth < MAX_DEPTH:
        if frame.f_code is loop[0] or frame.f_code is loop[2]:
            return True
        frame = frame.f_back
        depth += 1
    return False


#: ``_run_once``, ``Handle._run`` and ``Runner.run``'s code (None: a Python without ``Runner``).
LoopCodes = tuple[CodeType, CodeType, CodeType | None]
_loop: LoopCodes | None = None


def _loop_codes() -> LoopCodes | None:
    """The code of asyncio's event loop iteration (``BaseEventLoop._run_once``), of a callback's
    run in it (``Handle._run``) and of ``asyncio.Runner.run``, once the program has imported
    asyncio."""
    global _loop
    if _loop is None:
        base_events = sys.modules.get("asyncio.base_events")
        events = sys.modules.get("asyncio.events")
        runners = sys.modules.get("asyncio.runners")
        if base_events is None or events is None:
            return None
        try:
            iteration = base_events.BaseEventLoop._run_once.__code__
            callback = events.Handle._run.__code__
        except AttributeError:  # an asyncio without them: no loop is recognised
            return None
        runner = getattr(getattr(runners, "Runner", None), "run", None)
        _loop = iteration, callback, getattr(runner, "__code__", None)
    return _loop


_verdict: tuple[int, bool] = (0, False)  # (until when, open)


def open_async_work() -> bool:
    """Whether an event loop's wait serves work worth sampling: a measured request in flight
    (``measured.OPEN``), or a task suspended in (or not yet started at) a traced coroutine,
    a service's (an ASGI lifespan's) aside. Decided at most every ``VERDICT_NS``; never raises
    (in doubt, True: the sampler stays awake, as before)."""
    global _verdict
    now = time.monotonic_ns()
    until, verdict = _verdict
    if now < until:
        return verdict
    try:
        verdict = bool(measured.OPEN) or _traced_coroutine_suspended()
    except Exception:  # a task set changed under us (another thread's loop): in doubt
        verdict = True
    _verdict = (now + VERDICT_NS, verdict)
    return verdict


def _traced_coroutine_suspended() -> bool:
    tasks = _all_tasks()
    if len(tasks) > MAX_TASKS_SCANNED:
        return True
    service_code = service.run_async.__code__
    for task in tasks:
        awaited: Any = task.get_coro()
        depth = 0
        while awaited is not None and depth < MAX_DEPTH:
            code = _code_of(awaited)
            if code is None or code is service_code:  # a service's work is not a request's
                break
            if id(code) in WRAPPER_IDS or id(code) in TRACED_CODES:
                return True
            awaited = _awaiting(awaited)
            depth += 1
    return False


def _all_tasks() -> list[Any]:
    """Every asyncio task of the process, of every loop (``asyncio.all_tasks`` is one loop's,
    from its own thread): a snapshot."""
    tasks_module = sys.modules.get("asyncio.tasks")
    if tasks_module is None:
        return []
    found: list[Any] = []
    for name in ("_all_tasks", "_scheduled_tasks", "_eager_tasks"):  # 3.11; 3.12+
        registry: Iterable[Any] | None = getattr(tasks_module, name, None)
        if registry is not None:
            found.extend(list(registry))  # RuntimeError if a loop changed it meanwhile
    return found


def _code_of(awaitable: Any) -> CodeType | None:
    """The code of a coroutine (generator, async generator) not finished yet, else None (a done
    task keeps its finished coroutine)."""
    for prefix in ("cr_", "gi_", "ag_"):
        code: CodeType | None = getattr(awaitable, prefix + "code", None)
        if code is not None:
            return None if getattr(awaitable, prefix + "frame", None) is None else code
    return None


def _awaiting(awaitable: Any) -> Any:
    """What a suspended coroutine (generator, async generator) waits on, or None."""
    for attribute in ("cr_await", "gi_yieldfrom", "ag_await"):
        inner = getattr(awaitable, attribute, None)
        if inner is not None:
            return inner
    return None

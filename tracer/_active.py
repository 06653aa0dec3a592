"""Which threads the sampler reads when only active ones are (``only_active``, the default):
those inside a traced call, or in an asyncio event loop between the steps of its tasks."""

from __future__ import annotations

import sys
from types import CodeType, FrameType
from typing import Final

from tracer._core.codes import TRACED_CODES
from tracer._core.frames import WRAPPER_CODES

#: Frames walked from a thread's innermost one, at most (here and in the stacks sampled).
MAX_DEPTH: Final = 512


def worth_sampling(top: FrameType) -> bool:
    """Whether a thread seen at ``top`` is sampled when only active threads are: inside a traced
    call, or in an asyncio event loop itself (not in a callback or task step it runs) whose loop
    no traced call holds: between the steps of its tasks, traced ones among them perhaps
    (suspended, a traced coroutine leaves no frame on the stack), which the repository tells.

    A loop that iterates in C (uvloop) runs no Python frame of its own: between task steps the
    thread's innermost frame is ``asyncio.Runner.run`` (``asyncio.run``, ``uvloop.run``), which
    otherwise only calls the loop. Seen there, the thread is in its loop; in a step or callback
    such a loop runs, the step's frames are above it, as they are in any callback."""
    loop = _loop_codes()
    if loop is not None and top.f_code is loop[2]:
        return True
    in_callback = False
    frame: FrameType | None = top
    depth = 0
    while frame is not None and depth < MAX_DEPTH:
        code = frame.f_code
        if code in WRAPPER_CODES or id(code) in TRACED_CODES:
            return True
        if loop is not None:
            if code is loop[1]:
                in_callback = True
            elif code is loop[0] and not in_callback:
                return True
        frame = frame.f_back
        depth += 1
    return False


def in_event_loop(top: FrameType) -> bool:
    """Whether a thread seen at ``top`` runs an asyncio event loop, in a callback or not: its
    tasks may be suspended in traced coroutines, which leave no frame and record nothing when
    they resume, so the sampler never goes idle beside it (``Sampler._park``)."""
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

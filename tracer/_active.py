"""Which threads the sampler reads when only active ones are (``only_active``, the default):
those inside a traced call, or in an asyncio event loop between the steps of its tasks."""

from __future__ import annotations

import sys
from types import CodeType, FrameType
from typing import Final

from tracer._core.frames import WRAPPER_CODES

#: Frames walked from a thread's innermost one, at most (here and in the stacks sampled).
MAX_DEPTH: Final = 512


def worth_sampling(top: FrameType) -> bool:
    """Whether a thread seen at ``top`` is sampled when only active threads are: inside a traced
    call, or in an asyncio event loop itself (not in a callback or task step it runs) whose loop
    no traced call holds: between the steps of its tasks, traced ones among them perhaps
    (suspended, a traced coroutine leaves no frame on the stack), which the repository tells."""
    loop = _loop_codes()
    in_callback = False
    frame: FrameType | None = top
    depth = 0
    while frame is not None and depth < MAX_DEPTH:
        code = frame.f_code
        if code in WRAPPER_CODES:
            return True
        if loop is not None:
            if code is loop[1]:
                in_callback = True
            elif code is loop[0] and not in_callback:
                return True
        frame = frame.f_back
        depth += 1
    return False


_loop: tuple[CodeType, CodeType] | None = None


def _loop_codes() -> tuple[CodeType, CodeType] | None:
    """The code of asyncio's event loop iteration (``BaseEventLoop._run_once``) and of a
    callback's run in it (``Handle._run``), once the program has imported asyncio."""
    global _loop
    if _loop is None:
        base_events = sys.modules.get("asyncio.base_events")
        events = sys.modules.get("asyncio.events")
        if base_events is None or events is None:
            return None
        try:
            _loop = base_events.BaseEventLoop._run_once.__code__, events.Handle._run.__code__
        except AttributeError:  # an asyncio without them: no loop is recognised
            return None
    return _loop

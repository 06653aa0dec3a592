"""A sampled stack as the wire carries it: frame ids and lines, outermost first, the tracer's
own frames left out.

More in docs/architecture.md, "The stack sampler".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Final

from tracer._core import accel, recorder
from tracer._sampling.active import MAX_DEPTH

#: The tracer package's directory (this module sits in its _sampling folder): its frames are left
#: out of stacks.
TRACER_DIR: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: The C accelerator's ``stack_of`` (None: pure Python).
_stack_ids: Callable[..., tuple[tuple[int, ...], tuple[int, ...]]] | None = None
if accel.speedups is not None:
    from tracer._core import _speedups

    _stack_ids = _speedups.stack_ids


def stack_of(frames: FrameType | list[FrameType]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Frame ids and lines from the outermost call to the innermost, tracer frames left out: of
    the stack from the frame ``frames`` outwards, or of ``frames``, a list of a stack's frames
    from its innermost outwards (``worth_sampling`` collected them). A code seen before is looked
    up by its ``id`` inline (every frame of every tick comes here); a new one is interned, or
    marked as the tracer's own. In C with the accelerator (``_speedups.stack_ids``): a tick
    reads every frame of the stack, 40 and more under a web framework."""
    if _stack_ids is not None:
        return _stack_ids(frames, recorder.frame_ids_by_code_id(), _intern, MAX_DEPTH)
    ids: list[int] = []
    lines: list[int] = []
    known = recorder.frame_ids_by_code_id()
    for frame in walk(frames) if isinstance(frames, FrameType) else frames:
        if len(ids) >= MAX_DEPTH:
            break
        code = frame.f_code
        found = known.get(id(code))
        if found is None:
            found = _intern(code)
        if found:
            ids.append(found)
            lines.append(frame.f_lineno or 0)
    ids.reverse()
    lines.reverse()
    return tuple(ids), tuple(lines)


def _intern(code: CodeType) -> int:
    """A new code's frame id, or 0 (remembered as such) for the tracer's own code."""
    if code.co_filename.startswith(TRACER_DIR):
        return recorder.mark_own_code(code)
    return recorder.frame_id(code)


def walk(top: FrameType) -> Iterator[FrameType]:
    """A stack's frames from ``top`` outwards."""
    frame: FrameType | None = top
    while frame is not None:
        yield frame
        frame = frame.f_back

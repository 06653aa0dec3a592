"""A sampled stack as the wire carries it: frame ids and lines, outermost first, the tracer's
own frames left out.

More in docs/architecture.md, "The stack sampler".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from types import CodeType, FrameType
from typing import Final

from tracer._core import recorder
from tracer._sampling.active import MAX_DEPTH

#: The tracer package's directory (this module sits in its _sampling folder): its frames are left
#: out of stacks.
TRACER_DIR: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def stack_of(frames: Iterable[FrameType]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Frame ids and lines from the outermost call to the innermost, tracer frames left out: of
    ``frames``, a stack from its innermost frame outwards (``worth_sampling`` collected them, or
    ``walk`` walks them). A code seen before is looked up by its ``id`` inline (every frame of
    every tick comes here); a new one is interned, or marked as the tracer's own."""
    ids: list[int] = []
    lines: list[int] = []
    known = recorder.frame_ids_by_code_id()
    for frame in frames:
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

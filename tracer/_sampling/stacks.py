"""A sampled stack as the wire carries it: frame ids and lines, outermost first, the tracer's
own frames left out.

More in docs/architecture.md, "The stack sampler".
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Final

from tracer._core import recorder
from tracer._sampling.active import MAX_DEPTH

#: The tracer package's directory (this module sits in its _sampling folder): its frames are left
#: out of stacks.
TRACER_DIR: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def stack_of(frames: Iterable[FrameType]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Frame ids and lines from the outermost call to the innermost, tracer frames left out: of
    ``frames``, a stack from its innermost frame outwards (``worth_sampling`` collected them, or
    ``walk`` walks them)."""
    ids: list[int] = []
    lines: list[int] = []
    frame_id = recorder.frame_id
    for frame in frames:
        if len(ids) >= MAX_DEPTH:
            break
        code = frame.f_code
        if not code.co_filename.startswith(TRACER_DIR):
            ids.append(frame_id(code))
            lines.append(frame.f_lineno or 0)
    ids.reverse()
    lines.reverse()
    return tuple(ids), tuple(lines)


def walk(top: FrameType) -> Iterator[FrameType]:
    """A stack's frames from ``top`` outwards."""
    frame: FrameType | None = top
    while frame is not None:
        yield frame
        frame = frame.f_back

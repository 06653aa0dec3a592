"""A tick walks a thread's stack once: deciding whether the thread is worth sampling
(``active.worth_sampling``) hands the sampler the frames it walked, and the stack the sampler
records from them is the one a walk of its own gives (issue 33: the main thread's own ticks
interrupt a busy event loop)."""

from __future__ import annotations

import sys
from types import FrameType

import tracer
from tracer._sampling import active, stacks
from tracer.testing import capture


def _walk(top: FrameType | None) -> list[FrameType]:
    frames = []
    while top is not None:
        frames.append(top)
        top = top.f_back
    return frames


def test_deciding_inside_a_traced_call_collects_the_whole_stack_for_the_sample() -> None:
    seen: dict[str, object] = {}

    def untraced_inner() -> None:
        top = sys._getframe()
        frames: list[FrameType] = []
        seen["worth"] = active.worth_sampling(top, frames)
        seen["collected"] = frames
        seen["walked"] = _walk(top)
        seen["stacks"] = (stacks.stack_of(frames), stacks.stack_of(stacks.walk(top)))

    @tracer.traced
    def traced_outer() -> None:
        untraced_inner()

    with capture():
        traced_outer()
    assert seen["worth"] is True
    assert seen["collected"] == seen["walked"]  # every frame, innermost first, each once
    recorded, own_walk = seen["stacks"]  # type: ignore[misc]
    assert recorded[0] == own_walk[0]  # the same frames
    assert recorded[1][:-1] == own_walk[1][:-1]  # at the same lines (the innermost moved on)
    assert len(recorded[0]) == len(recorded[1]) > 0


def test_outside_traced_calls_nothing_is_worth_sampling_and_the_walk_is_not_kept() -> None:
    frames: list[FrameType] = []
    assert active.worth_sampling(sys._getframe(), frames) is False
    assert active.worth_sampling(sys._getframe()) is False  # as before: no list asked for

"""A tick walks a thread's stack once: deciding whether the thread is worth sampling
(``active.worth_sampling``) hands the sampler the frames it walked, and the stack the sampler
records from them is the one a walk of its own gives (issue 33: the main thread's own ticks
interrupt a busy event loop)."""

from __future__ import annotations

import sys
from types import FrameType

import pytest

import tracer
from tracer._core import recorder
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
        seen["stacks"] = (stacks.stack_of(frames), stacks.stack_of(top))

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


def test_equal_codes_of_two_files_are_two_frames_with_their_own_files() -> None:
    """A sampled frame is interned by its code object's identity: two functions whose codes
    compare equal (the same source in two files: code equality ignores the file) are two
    frames, each named by its own file; hashing a code per frame, as a dict of codes did, also
    cost up to 1.5 µs a frame on every tick."""
    source = "def handler(x):\n    return x + 1\n"
    first: dict[str, object] = {}
    second: dict[str, object] = {}
    exec(compile(source, "/srv/app_one/views.py", "exec"), first)
    exec(compile(source, "/srv/app_two/views.py", "exec"), second)
    code_one = first["handler"].__code__  # type: ignore[attr-defined]
    code_two = second["handler"].__code__  # type: ignore[attr-defined]
    assert code_one == code_two  # what made them one frame

    one, two = recorder.frame_id(code_one), recorder.frame_id(code_two)

    assert one != two
    assert recorder.frame_id(code_one) == one  # interned once
    files = {frame[0]: frame[1] for frame in recorder.frames_since(0)}
    assert files[one] == "/srv/app_one/views.py"
    assert files[two] == "/srv/app_two/views.py"


def test_the_c_stack_and_the_pure_python_one_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stack_of`` in C (``_speedups.stack_ids``) gives what the pure-Python loop gives: the
    same ids and lines, the tracer's own frames left out, at most ``MAX_DEPTH`` frames kept (the
    innermost), from a frame or from a list of frames."""
    if stacks._stack_ids is None:
        pytest.skip("pure Python: stack_of has no C path")
    seen: list[tuple[object, object]] = []

    def dive(depth: int) -> None:
        if depth:
            dive(depth - 1)
            return
        top = sys._getframe()
        for pure in (False, True):  # the same line both times: the innermost frame's too
            if pure:
                monkeypatch.setattr(stacks, "_stack_ids", None)
            seen.append((stacks.stack_of(top), stacks.stack_of(_walk(top))))
        monkeypatch.undo()

    def hidden(depth: int) -> None:  # marked as the tracer's own: left out of every stack
        dive(depth)

    @tracer.traced
    def traced_outer(depth: int) -> None:
        hidden(depth)

    recorder.mark_own_code(hidden.__code__)
    with capture():
        for depth in (3, active.MAX_DEPTH + 40):  # the second past the depth kept
            seen.clear()
            traced_outer(depth)
            (by_c, by_c_list), (by_python, by_python_list) = seen
            assert by_c == by_c_list == by_python == by_python_list, depth
            ids, lines = by_c  # type: ignore[misc]
            assert len(ids) == len(lines)
            if depth == 3:  # the whole stack: hidden's frame was on it, and left out
                assert len(ids) == len(_walk(sys._getframe())) + depth + 2
            assert len(ids) == active.MAX_DEPTH if depth > active.MAX_DEPTH else len(ids) > depth

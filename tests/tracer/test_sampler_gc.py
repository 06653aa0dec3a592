"""The sampler reads every thread's stack (``sys._current_frames()``) with the cyclic collector
held off on 3.11: a collection inside that call runs finalizers while CPython holds its list of
threads, and one that lets the GIL go can hang the process (python/cpython#106883; a test of
ours hung so on 3.11.7). A program's own setting of the collector is kept."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from types import FrameType

import pytest

from tracer._sampling import sampler


@pytest.fixture(name="collector_state")
def fixture_collector_state() -> Iterator[Callable[[], list[bool]]]:
    """``sys._current_frames`` noting whether the collector was on at each call."""
    seen: list[bool] = []
    real = sys._current_frames

    def noting() -> dict[int, FrameType]:
        seen.append(gc.isenabled())
        return real()

    enabled = gc.isenabled()
    sys._current_frames = noting
    try:
        yield lambda: seen
    finally:
        sys._current_frames = real
        (gc.enable if enabled else gc.disable)()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 collects between bytecodes only")
def test_the_stacks_are_read_with_the_collector_off_and_it_is_on_again_after(
    collector_state: Callable[[], list[bool]],
) -> None:
    gc.enable()
    assert sampler.current_frames()
    assert collector_state() == [False]
    assert gc.isenabled()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 collects between bytecodes only")
def test_a_program_that_turned_the_collector_off_keeps_it_off(
    collector_state: Callable[[], list[bool]],
) -> None:
    gc.disable()
    assert sampler.current_frames()
    assert collector_state() == [False]
    assert not gc.isenabled()

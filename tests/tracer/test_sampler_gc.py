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
@pytest.mark.parametrize("program_has_it_on", [True, False])
def test_the_stacks_are_read_with_the_collector_off_and_it_is_left_as_the_program_set_it(
    collector_state: Callable[[], list[bool]], program_has_it_on: bool
) -> None:
    (gc.enable if program_has_it_on else gc.disable)()
    assert sampler.current_frames()
    assert collector_state() == [False]
    assert gc.isenabled() is program_has_it_on

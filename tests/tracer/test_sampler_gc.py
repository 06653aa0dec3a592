"""The sampler reads every thread's stack (``sys._current_frames()``) with the cyclic collector
held off on 3.11: a collection inside that call runs finalizers while CPython holds its list of
threads, and one that lets the GIL go can hang the process (python/cpython#106883; a test of
ours hung so on 3.11.7). A program's own setting of the collector is kept."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

import pytest

from tests.tracer.core.implementations import needs_c_path
from tracer._sampling import sampler, stacks


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
    frames, _ = sampler.current_frames()
    assert frames
    assert collector_state() == [False]
    assert gc.isenabled() is program_has_it_on


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 collects between bytecodes only")
@needs_c_path
def test_another_threads_frames_are_made_with_the_collector_off_and_walks_make_none() -> None:
    """Making another thread's frame objects allocates, and a collection that starts there may
    run a finalizer that lets the GIL go, while that thread returns from the frame being made
    (Sentry's and Datadog's samplers crashed so on 3.11). So the frames of the other threads'
    stacks are all made as the stacks are read, the collector off: the walks after it (the
    sampler's, outwards from each top) meet only frame objects made then."""
    reached = threading.Event()
    release = threading.Event()

    def nested(levels: int) -> None:
        if levels:
            nested(levels - 1)
            return
        reached.set()
        release.wait(30)

    worker = threading.Thread(target=nested, args=(20,))
    worker.start()
    try:
        assert reached.wait(30)
        frames, held = sampler.current_frames()
        made = {id(frame) for frame in held}
        walked = list(stacks.walk(frames[worker.ident or 0]))
        assert len(walked) > 20
        assert [frame for frame in walked if id(frame) not in made] == []
        assert not any(frame in held for frame in stacks.walk(sys._getframe()))  # not its own
    finally:
        release.set()
        worker.join(30)
    assert not worker.is_alive()

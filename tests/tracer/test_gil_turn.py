"""The sampler thread takes its turn at the GIL when its tick is due (tracer/_sampling/_gil_turn.c):
it sees a busy thread where it works, not where it gives the GIL up for moments; stop wakes it at
once; a forked child's copy never waits.

Each test runs real threads, fixed by count, every wait bounded.
"""

from __future__ import annotations

import collections
import os
import select
import sys
import threading
import time
from collections.abc import Callable

import pytest

from tests.support import run_program

_gil_turn = pytest.importorskip(
    "tracer._sampling._gil_turn", reason="built on Linux with a compiler"
)

TURNS = 100
TICK_NS = 1_000_000


def work(count: int) -> None:
    for _ in range(count):
        pass


def busy_with_short_releases(stop: threading.Event, started: threading.Event) -> None:
    """Steps of work, each followed by a select() that releases the GIL for microseconds (what
    an event loop does between task steps)."""
    started.set()
    while not stop.is_set():
        work(5_000)
        select.select([], [], [], 0)


def where_a_busy_thread_is_seen(wait: Callable[[int], object]) -> collections.Counter[str]:
    """``TURNS`` ticks of ``wait(TICK_NS)`` beside a thread busy with short GIL releases: where
    each tick saw it (its innermost Python function)."""
    stop, started = threading.Event(), threading.Event()
    busy = threading.Thread(target=busy_with_short_releases, args=(stop, started), daemon=True)
    busy.start()
    seen: collections.Counter[str] = collections.Counter()
    began = time.monotonic()
    try:
        assert started.wait(10)
        for _ in range(TURNS):
            wait(TICK_NS)
            frame = sys._current_frames().get(busy.ident or 0)
            seen[frame.f_code.co_name if frame is not None else "?"] += 1
            if time.monotonic() - began > 60:  # bounded: starved, as without the turn
                break
    finally:
        stop.set()
        busy.join(10)
    return seen


def test_a_tick_sees_a_busy_thread_at_its_work_not_where_it_gives_up_the_gil() -> None:
    """Without its turn a waiter, woken at each release, finds the GIL taken again and waits
    anew: it saw the thread in its select() every time (30 of 30 ticks, some 200 ms apart at a
    1 ms interval). With it, the holder gives the GIL up where it is."""
    turn = _gil_turn.Turn()
    seen = where_a_busy_thread_is_seen(turn.wait)
    assert sum(seen.values()) == TURNS, seen
    assert seen["work"] >= 0.8 * TURNS, seen


def test_stop_wakes_a_wait_at_once_and_every_later_wait_returns_at_once() -> None:
    turn = _gil_turn.Turn()
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(turn.wait(600 * 10**9)))
    waiter.start()
    time.sleep(0)  # let it start waiting; the test does not depend on it
    turn.stop()
    waiter.join(10)
    assert not waiter.is_alive()
    assert result == [True]
    assert turn.wait(600 * 10**9) is True


def test_a_wait_that_times_out_says_it_was_not_stopped() -> None:
    assert _gil_turn.Turn().wait(1_000) is False
    assert _gil_turn.Turn().wait(-5) is False  # no time left: at once


# In a fresh interpreter: the test process holds other tests' threads and fork handlers
# (gRPC's among them), and a child forked beside those may hang in them, not in the turn.
FORKED_TURN = """
import os, select
from tracer._sampling import _gil_turn

turn = _gil_turn.Turn()
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the child: the parent's sampler thread is not here
    try:
        os.write(write, b"1" if turn.wait(600 * 10**9) is True else b"0")
        turn.stop()
    finally:
        os._exit(0)
os.close(write)
ready, _w, _x = select.select([read], [], [], 30)
print(os.read(read, 1).decode() if ready else "the child waited", flush=True)
if not ready:
    os.kill(pid, 9)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_never_waits_on_its_parents_turn() -> None:
    command = [sys.executable, "-c", FORKED_TURN]
    done = run_program(command, timeout_s=60)  # a hung child is killed with its group
    assert (done.returncode, done.stdout.strip()) == (0, "1"), done.stderr

"""The sampler's pace: its interval lengthens when its ticks cost more than 1 % of the time and
comes back, never below the configured interval, when they are cheap."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import tracer
from tracer._sampling import pacing as _pacing
from tracer._sampling import sampler as sampler_module
from tracer._sampling.pacing import LONGEST_NS, WINDOW_NS, Pacer, paced
from tracer.testing import capture

MS = 1_000_000
SECOND = 1_000 * MS


def test_ticks_within_the_budget_keep_the_interval() -> None:
    assert paced(10 * MS, 10 * MS, cost_ns=9 * MS, elapsed_ns=SECOND) == 10 * MS  # 0.9 %
    assert paced(10 * MS, 10 * MS, cost_ns=0, elapsed_ns=SECOND) == 10 * MS


def test_dear_ticks_lengthen_the_interval_to_hold_the_cost_below_one_percent() -> None:
    interval = paced(10 * MS, 10 * MS, cost_ns=30 * MS, elapsed_ns=SECOND)  # 3 %
    assert interval == round(10 * MS * 0.03 / _pacing.TARGET_SHARE)  # 4x: 0.75 % at that pace
    assert interval > 10 * MS


def test_the_interval_never_grows_past_the_longest() -> None:
    assert paced(10 * MS, 10 * MS, cost_ns=SECOND, elapsed_ns=SECOND) == LONGEST_NS
    assert paced(2 * SECOND, 2 * SECOND, cost_ns=SECOND, elapsed_ns=SECOND) == 2 * SECOND


def test_cheap_ticks_shorten_it_back_but_never_below_the_configured_interval() -> None:
    shorter = paced(80 * MS, 10 * MS, cost_ns=3 * MS, elapsed_ns=SECOND)  # 0.3 %
    assert 10 * MS < shorter < 80 * MS
    assert paced(40 * MS, 10 * MS, cost_ns=0, elapsed_ns=SECOND) == 10 * MS
    assert paced(20 * MS, 10 * MS, cost_ns=7 * MS, elapsed_ns=SECOND) == 20 * MS  # in the band


def test_the_pacer_judges_whole_windows_and_remembers_the_longest_interval() -> None:
    pacer = Pacer(10 * MS, now_ns=0)
    tick = 10 * MS
    # Ticks costing 5 % each: nothing changes before a window has passed, then it lengthens.
    for n in range(1, WINDOW_NS // tick):
        assert pacer.tick(tick // 20, now_ns=n * tick) == 10 * MS
    now = WINDOW_NS
    longer = pacer.tick(tick // 20, now_ns=now)
    assert longer > 10 * MS
    # Then cheap ticks, window after window, bring it back to the configured interval.
    for _ in range(20):
        now += WINDOW_NS
        pacer.tick(0, now_ns=now)
    assert pacer.interval_ns == 10 * MS
    assert pacer.longest_ns == longer


@contextmanager
def deep_threads() -> Iterator[None]:
    """Eight threads waiting 200 calls deep inside a traced call: sampling them costs far more
    than 1 % of a 1 ms interval, on any machine."""
    release = threading.Event()
    entered = [threading.Event() for _ in range(8)]

    def dive(depth: int, entered: threading.Event) -> None:
        if depth:
            dive(depth - 1, entered)
        else:
            entered.set()
            release.wait(60)

    @tracer.traced
    def deep(entered: threading.Event) -> None:
        dive(200, entered)

    threads = [threading.Thread(target=deep, args=(e,)) for e in entered]
    for thread in threads:
        thread.start()
    try:
        assert all(e.wait(60) for e in entered)
        yield
    finally:
        release.set()
        for thread in threads:
            thread.join(60)


def test_the_sampler_lengthens_its_interval_when_its_ticks_are_dear_and_reports_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lengthened = threading.Event()

    class Watched(Pacer):
        __slots__ = ()

        def tick(self, cost_ns: int, now_ns: int) -> int:
            interval = super().tick(cost_ns, now_ns)
            if interval > self.configured_ns:
                lengthened.set()
            return interval

    monkeypatch.setattr(sampler_module, "Pacer", Watched)
    with capture(sample_interval_ms=1, max_threads_per_tick=8) as trace, deep_threads():
        assert lengthened.wait(60), "the interval never lengthened"
        trace.flush()
    report = trace.batches[-1].sampler
    assert report is not None
    assert report.interval_ms == 1
    assert report.longest_interval_ns > MS
    assert report.current_interval_ns >= MS


def test_a_pacer_turned_off_keeps_the_configured_interval_however_dear_the_ticks() -> None:
    pacer = Pacer(10 * MS, now_ns=0, enabled=False)
    for n in range(1, 50):
        assert pacer.tick(5 * MS, now_ns=n * WINDOW_NS) == 10 * MS  # each tick: 5 % of a window
    assert pacer.longest_ns == 10 * MS


def test_with_pacing_off_the_sampler_keeps_its_interval_on_dear_ticks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    windows = threading.Event()

    class Counted(Pacer):
        __slots__ = ()
        ticks = 0

        def tick(self, cost_ns: int, now_ns: int) -> int:
            Counted.ticks += 1
            if Counted.ticks >= 3 * WINDOW_NS // MS:  # at 1 ms or slower: three windows at least
                windows.set()
            return super().tick(cost_ns, now_ns)

    monkeypatch.setattr(sampler_module, "Pacer", Counted)
    settings = {"sample_interval_ms": 1, "max_threads_per_tick": 8, "sample_pacing": False}
    with capture(**settings) as trace, deep_threads():  # type: ignore[arg-type]
        assert windows.wait(120), "the sampler did not tick"
        trace.flush()
    report = trace.batches[-1].sampler
    assert report is not None
    assert (report.current_interval_ns, report.longest_interval_ns) == (MS, MS)

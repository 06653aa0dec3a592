"""The sampler's pace: the interval between its ticks, lengthened when its ticks cost more than
1 % of the time and shortened back, never below the configured interval, when they are cheap.

More in docs/architecture.md, "tracer/_sampling/pacing.py".
"""

from __future__ import annotations

from typing import Final

#: The most of the time the sampler's ticks may cost, over a window.
MAX_SHARE: Final = 0.01
#: The share an adjusted interval aims at: inside the band (MAX_SHARE / 2, MAX_SHARE).
TARGET_SHARE: Final = 0.0075
#: A window lasts at least this long (and one tick): short enough to act within a second.
WINDOW_NS: Final = 100_000_000
#: The interval never grows past this (or the configured interval, if longer): a tick a second
#: still shows where the threads are.
LONGEST_NS: Final = 1_000_000_000


def paced(interval_ns: int, configured_ns: int, cost_ns: int, elapsed_ns: int) -> int:
    """The interval to use after a window of ``elapsed_ns`` whose ticks cost ``cost_ns``,
    ticking every ``interval_ns`` (configured: ``configured_ns``)."""
    if elapsed_ns <= 0:
        return interval_ns
    share = cost_ns / elapsed_ns
    if share > MAX_SHARE or (share < MAX_SHARE / 2 and interval_ns > configured_ns):
        wanted = round(interval_ns * share / TARGET_SHARE)
        return max(configured_ns, min(wanted, max(LONGEST_NS, configured_ns)))
    return interval_ns


class Pacer:
    """Windows the sampler's ticks and applies ``paced`` at the end of each: ``interval_ns`` is
    the interval in effect, ``longest_ns`` the longest it has been."""

    __slots__ = ("_cost", "_since", "configured_ns", "enabled", "interval_ns", "longest_ns")

    def __init__(self, interval_ns: int, now_ns: int, *, enabled: bool = True) -> None:
        self.configured_ns = self.interval_ns = self.longest_ns = interval_ns
        self.enabled = enabled  # off (``sample_pacing = false``): the interval never changes
        self._since = now_ns
        self._cost = 0

    def tick(self, cost_ns: int, now_ns: int) -> int:
        """One more tick, which cost ``cost_ns``; the interval to use from ``now_ns`` on."""
        if not self.enabled:
            return self.interval_ns
        self._cost += cost_ns
        elapsed = now_ns - self._since
        if elapsed >= WINDOW_NS:
            self.interval_ns = paced(self.interval_ns, self.configured_ns, self._cost, elapsed)
            self.longest_ns = max(self.longest_ns, self.interval_ns)
            self._since, self._cost = now_ns, 0
        return self.interval_ns

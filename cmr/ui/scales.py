"""The two axes of ``cmr ui``'s charts, as pure arithmetic: durations on a log scale (a decade
of durations takes the same height wherever it sits, so 1 ms and 1 s both read) and start
times on a linear one, each with the ticks an axis labels.

A scale maps onto a band of pixels of the SVG's own coordinates (its ``viewBox``); the page's
script inverts the same formulas to turn a drag back into times and durations, from the
bounds the SVG carries as ``data-`` attributes (``charts.scale_attributes``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

#: Tick steps of the time axis, in seconds: the first giving at most MAX_TIME_TICKS ticks.
_TIME_STEPS: Final = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10_800,
    21_600,
    43_200,
    86_400,
    2 * 86_400,
    7 * 86_400,
    30 * 86_400,
)
MAX_TIME_TICKS: Final = 6
#: A time axis over a single moment (one sequence) is this wide, centred on it.
SINGLE_MOMENT_NS: Final = 1_000_000_000
#: The share of the time axis left empty at each end, so no dot sits on the frame.
TIME_MARGIN: Final = 0.03
_SECOND: Final = 1_000_000_000


@dataclass(frozen=True, slots=True)
class LogScale:
    """Durations ``low_ns``..``high_ns`` (powers of ten) onto pixels ``bottom``..``top``: the
    shortest at the bottom. A duration outside is drawn at the nearest end (0 ns at the low)."""

    low_ns: int
    high_ns: int
    top: float
    bottom: float

    def y(self, duration_ns: int) -> float:
        clamped = min(max(duration_ns, self.low_ns), self.high_ns)
        low, high = math.log10(self.low_ns), math.log10(self.high_ns)
        share = (math.log10(clamped) - low) / (high - low)
        return self.bottom - share * (self.bottom - self.top)

    def ticks(self) -> list[int]:
        """One tick per power of ten from ``low_ns`` to ``high_ns``."""
        first, last = round(math.log10(self.low_ns)), round(math.log10(self.high_ns))
        return [10**power for power in range(first, last + 1)]


def log_scale(durations: Iterable[int], top: float, bottom: float) -> LogScale:
    """The scale from the power of ten at or below the shortest duration to the one at or
    above the longest (at least one decade; 1 µs to 1 s when there is none)."""
    values = [max(1, duration) for duration in durations]
    if not values:
        return LogScale(1_000, _SECOND, top, bottom)
    low = 10 ** math.floor(math.log10(min(values)))
    high = 10 ** math.ceil(math.log10(max(values)))
    return LogScale(low, max(high, low * 10), top, bottom)


@dataclass(frozen=True, slots=True)
class TimeScale:
    """Wall-clock nanoseconds ``first_ns``..``last_ns`` onto pixels ``left``..``right``."""

    first_ns: int
    last_ns: int
    left: float
    right: float

    def x(self, ns: int) -> float:
        share = (ns - self.first_ns) / (self.last_ns - self.first_ns)
        return self.left + share * (self.right - self.left)

    def step_ns(self) -> int:
        span_s = (self.last_ns - self.first_ns) / _SECOND
        for step in _TIME_STEPS:
            if span_s / step <= MAX_TIME_TICKS:
                return round(step * _SECOND)
        return round(_TIME_STEPS[-1] * _SECOND)

    def ticks(self) -> list[int]:
        """Round moments of local time inside the axis, at a step giving a few of them."""
        step = self.step_ns()
        offset = _utc_offset_ns(self.first_ns)
        first = -(-(self.first_ns + offset) // step) * step - offset
        return list(range(first, self.last_ns + 1, step))

    def label(self, ns: int) -> str:
        """A tick's label, local time, as precise as the step needs (with the day when the axis
        spans more than one)."""
        step = self.step_ns()
        moment = datetime.datetime.fromtimestamp(ns / _SECOND)
        if self.last_ns - self.first_ns > 86_400 * _SECOND:
            return moment.strftime("%m-%d %H:%M")
        if step < _SECOND:
            return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
        if step < 60 * _SECOND:
            return moment.strftime("%H:%M:%S")
        return moment.strftime("%H:%M")


def time_scale(starts: Iterable[int], left: float, right: float) -> TimeScale:
    """The scale over the start times, a little wider at both ends (a second around a single
    moment)."""
    values = list(starts)
    if not values:
        now = datetime.datetime.now().timestamp()
        values = [round(now * _SECOND)]
    first, last = min(values), max(values)
    if last - first < SINGLE_MOMENT_NS // 100:
        first = (first + last) // 2 - SINGLE_MOMENT_NS // 2
        return TimeScale(first, first + SINGLE_MOMENT_NS, left, right)
    margin = round((last - first) * TIME_MARGIN)
    return TimeScale(first - margin, last + margin, left, right)


def _utc_offset_ns(ns: int) -> int:
    offset = datetime.datetime.fromtimestamp(ns / _SECOND).astimezone().utcoffset()
    return 0 if offset is None else round(offset.total_seconds() * _SECOND)


#: The frame both charts share, in SVG units: the same height and duration band, so the
#: histogram beside the scatter reads on the scatter's duration axis.
HEIGHT: Final = 250
PLOT_TOP: Final = 30  # above: the strip of sequences that never ended
PLOT_BOTTOM: Final = 220  # below: the time axis
NO_END_Y: Final = 14

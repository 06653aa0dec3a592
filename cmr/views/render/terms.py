"""The words and colours every text view shares: durations and times of day for a human,
plurals, and the palette (ANSI escapes, or none)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

_UNITS = ((1_000, "µs"), (1_000_000, "ms"))


@dataclass(frozen=True, slots=True)
class Palette:
    """ANSI escapes, or empty strings when colour is off (then the output is plain text)."""

    red: str = ""
    yellow: str = ""
    green: str = ""
    magenta: str = ""
    cyan: str = ""
    dim: str = ""
    bold: str = ""
    reset: str = ""


PLAIN = Palette()
ANSI = Palette(
    red="\033[31m",
    yellow="\033[33m",
    green="\033[32m",
    magenta="\033[35m",
    cyan="\033[36m",
    dim="\033[2m",
    bold="\033[1m",
    reset="\033[0m",
)


def format_duration(ns: int) -> str:
    """Nanoseconds for a human: the largest fitting unit, three significant digits."""
    if ns < 1_000:
        return f"{max(ns, 0)} ns"
    for scale, unit in _UNITS:
        text = _three_digits(ns / scale)
        if float(text) < 1_000:  # 999.6 µs rounds to "1000": then it is 1.00 ms
            return f"{text} {unit}"
    return f"{_three_digits(ns / 1e9)} s"


def format_time_of_day(ns: int) -> str:
    """Wall-clock nanoseconds as local time of day to the millisecond (12:00:01.234)."""
    seconds, rest = divmod(ns, 1_000_000_000)  # integers: a float would round .2349999 up
    return (
        datetime.datetime.fromtimestamp(seconds).strftime("%H:%M:%S.") + f"{rest // 1_000_000:03d}"
    )


def _three_digits(value: float) -> str:
    text = f"{value:.2f}"
    if float(text) >= 10:
        text = f"{value:.1f}"
    if float(text) >= 100:
        text = f"{value:.0f}"
    return text


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}{'es' if word[-1] == 's' else 's'}"

"""The words and colours every text view shares: durations and times of day for a human,
plurals, the palette (ANSI escapes, or none), and ``printable``: text that came from the wire,
made safe for a terminal."""

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


def _escapes() -> dict[int, str]:
    r"""Code point -> its escape: the C0 controls, DEL and the C1 controls (``\x1b``; a tab,
    line feed and carriage return as ``\t``, ``\n``, ``\r``), the line and paragraph
    separators and the bidirectional embeddings, overrides and isolates (``\u202e``), which
    reorder what a terminal shows."""
    controls = [*range(0x20), *range(0x7F, 0xA0)]
    formats = [0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    return {
        **{code: f"\\x{code:02x}" for code in controls},
        **{code: f"\\u{code:04x}" for code in formats},
        **{ord(c): repr(c)[1:-1] for c in "\t\n\r"},
    }


_ESCAPES: dict[int, str] = _escapes()


def printable(text: str) -> str:
    r"""``text`` as a terminal may show it: a name, thread name, host, error or log line any
    sender could have written, its control characters escaped (``\x1b``, ``\r``, ``\u202e``)
    so none can move the cursor, clear the screen, set the window title, forge a line or
    reorder the text around it. Printable text (``é``, ``中文``) stays as it is, and a
    backslash too. Every text output calls it on what came from the wire; JSON keeps the
    text exact."""
    if text.isprintable():  # the common case: nothing to escape, no copy
        return text
    return text.translate(_ESCAPES)

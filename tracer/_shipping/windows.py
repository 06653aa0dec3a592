"""The time windows of drops whose sequences a process could not name (``Batch.lost_windows``).

More in docs/architecture.md, "tracer/_shipping/windows.py".
"""

from __future__ import annotations

from typing import Final

#: Windows kept until reported, and reported by one batch at most (``wire.MAX_LOST_WINDOWS``
#: allows more: a later tracer may keep more).
MAX_WINDOWS: Final = 16

Window = tuple[int, int]


def merged(first: Window, second: Window) -> Window:
    return min(first[0], second[0]), max(first[1], second[1])


class LostWindows:
    """The windows no batch has reported yet (the sender's worker thread alone uses it)."""

    def __init__(self) -> None:
        self._windows: list[Window] = []

    def add(self, window: Window) -> None:
        """A drop whose sequences are not all named happened within ``window``."""
        first, last = window
        windows = sorted([*self._windows, (min(first, last), max(first, last))])
        joined: list[Window] = []
        for current in windows:
            if joined and current[0] <= joined[-1][1]:
                joined[-1] = merged(joined[-1], current)
            else:
                joined.append(current)
        while len(joined) > MAX_WINDOWS:
            gaps = [joined[i + 1][0] - joined[i][1] for i in range(len(joined) - 1)]
            closest = gaps.index(min(gaps))
            joined[closest : closest + 2] = [merged(joined[closest], joined[closest + 1])]
        self._windows = joined

    def to_report(self) -> tuple[Window, ...]:
        return tuple(self._windows)

    def reported(self, windows: tuple[Window, ...]) -> None:
        """A batch carries ``windows`` (``to_report``): they are its to deliver now."""
        if windows:
            self._windows = [w for w in self._windows if w not in windows]

    def __bool__(self) -> bool:
        return bool(self._windows)

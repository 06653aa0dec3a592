"""Progress on long work, on one line of standard error: ``importing 12,345 / 100,000 batches
12%, about 8 s left``, refreshed in place with a carriage return.

Shown only when standard error is a terminal and ``INVOSEQ_PROGRESS`` is not ``0``, decided once
when the work starts (``start``): otherwise the work gets ``NO_PROGRESS``, whose methods do
nothing, so a pipe, a file or a test sees not one byte more. Short work prints nothing: the line
appears once the work has run for ``INVOSEQ_PROGRESS_AFTER`` seconds (default 0.75; tests set 0),
is redrawn at most every ``REFRESH_S``, and is erased by ``close`` before the command says
anything else, so it never mixes with the command's own output.

Used by ``cmr import``, ``prune``, ``report`` and ``export``, and by ``tracer run`` (which may
import ``cmr``) at its end. The clock is injected, so the tests drive it by hand.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final, TextIO

#: ``0`` turns progress off; anything else (or unset) leaves it to standard error being a terminal.
PROGRESS_ENV: Final = "INVOSEQ_PROGRESS"
#: Seconds of work before the line first appears (a float; undocumented, for tests: ``0``).
AFTER_ENV: Final = "INVOSEQ_PROGRESS_AFTER"
AFTER_S: Final = 0.75
#: The least time between two redraws of the line.
REFRESH_S: Final = 0.25
#: Seconds between two redraws instead (undocumented, for tests: ``0``, every update draws).
EVERY_ENV: Final = "INVOSEQ_PROGRESS_EVERY"
#: The ticker's period when the refresh is faster (or 0).
_TICK_MIN_S: Final = 0.05
#: What ``--help`` says of it, one sentence for every command that shows it.
HELP: Final = (
    f"On a terminal, work still going after {AFTER_S:g} s shows its progress on standard error "
    f"(counts and the time left); {PROGRESS_ENV}=0 turns it off."
)
_ERASE: Final = "\r\x1b[K"  # back to the line's start, and clear to its end


class Progress:
    """One line of progress for one piece of work, in steps of ``unit`` (``batches``).

    ``update(done)`` as the work goes (cheap when nothing is due: a lock and a clock reading),
    ``phase(what)`` when it moves to another part, ``close()`` at the end (always: it is what
    erases the line and stops the ticker). ``start_ticker()`` redraws the line while the work
    is inside one long call that reports nothing (the time spent goes on), reading the count
    from ``follow``'s function if one was given."""

    def __init__(
        self,
        stream: TextIO,
        what: str,
        *,
        unit: str,
        total: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        after_s: float = AFTER_S,
        refresh_s: float = REFRESH_S,
        width: int = 80,
    ) -> None:
        self._stream = stream
        self._clock = clock
        self._refresh_s = refresh_s
        self._width = max(20, width)
        self._lock = threading.Lock()
        self._shown = False
        self._line = ""
        self._closed = False
        self._next_s = clock() + after_s  # nothing before: short work prints nothing
        self._read: Callable[[], int] | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._begin(what, unit, total)

    def _begin(self, what: str, unit: str, total: int | None) -> None:
        self._what, self._unit, self._total = what, unit, total
        self._started_s = self._clock()
        self._done = 0

    def phase(self, what: str, *, unit: str | None = None, total: int | None = None) -> None:
        """Another part of the work: its own counts and its own estimate, drawn at once if the
        line is already showing (so a phase is never hidden by the refresh limit). A phase
        counted by ``follow`` gets its last count first."""
        read = self._read
        if read is not None:
            with contextlib.suppress(Exception):  # (as the ticker: the count is the caller's)
                self.update(read())
        with self._lock:
            self._read = None
            self._begin(what, unit or self._unit, total)
            if self._shown:
                self._draw(self._clock())
        self.tick()

    def follow(self, read: Callable[[], int]) -> None:
        """The ticker reads the phase's count from ``read`` (work done in another thread)."""
        self._read = read

    def update(self, done: int, total: int | None = None) -> None:
        """``done`` of the phase's total (``total``, when it is known only now): redraws the line
        if it is due."""
        self._done = done
        if total is not None:
            self._total = total
        self.tick()

    def tick(self) -> None:
        """Redraw the line if it is due."""
        with self._lock:
            now = self._clock()
            if now >= self._next_s and not self._closed:
                self._draw(now)

    def start_ticker(self) -> None:
        """A daemon thread that calls ``tick`` (or ``update`` with ``follow``'s count) every
        ``refresh_s`` until ``close``."""
        if self._ticker is None and not self._closed:
            self._ticker = threading.Thread(target=self._tick_on, name="invoseq-progress")
            self._ticker.daemon = True
            self._ticker.start()

    def _tick_on(self) -> None:
        while not self._stop.wait(max(self._refresh_s, _TICK_MIN_S)):
            self.tick_following()

    def tick_following(self) -> None:
        """The ticker's round: the count from ``follow``'s function, if the phase still follows
        it once read (the work may move on meanwhile), then ``tick``."""
        read = self._read
        if read is not None:
            try:
                done = read()
            except Exception:  # a count that cannot be read now: the time spent still shows
                done = None
            with self._lock:
                if done is not None and self._read is read:
                    self._done = done
        self.tick()

    def _draw(self, now: float) -> None:
        line = describe(self._what, self._done, self._total, self._unit, now - self._started_s)
        line = line[: self._width - 1]
        self._next_s = now + self._refresh_s
        if self._shown and line == self._line:
            return  # the same words: the terminal has them
        try:
            self._stream.write(_ERASE + line)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away (or stderr was closed): the work
            self._closed = True  # goes on without its line, which is never worth failing for
            return
        self._shown, self._line = True, line

    def close(self) -> None:
        """Stop the ticker and erase the line (if one was drawn): what the command prints next
        starts a clean line. Harmless twice."""
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()
        with self._lock:
            if self._shown:
                with contextlib.suppress(OSError, ValueError):  # a terminal gone away
                    self._stream.write(_ERASE)
                    self._stream.flush()
                self._shown = False
            self._closed = True


class _NoProgress(Progress):
    """Progress off: every method does nothing."""

    def __init__(self) -> None:
        pass

    def phase(self, what: str, *, unit: str | None = None, total: int | None = None) -> None:
        pass

    def follow(self, read: Callable[[], int]) -> None:
        pass

    def update(self, done: int, total: int | None = None) -> None:
        pass

    def tick(self) -> None:
        pass

    def start_ticker(self) -> None:
        pass

    def close(self) -> None:
        pass


NO_PROGRESS: Final[Progress] = _NoProgress()


def enabled(stream: TextIO | None = None) -> bool:
    """Progress is wanted on ``stream`` (standard error): a terminal, and not turned off."""
    if os.environ.get(PROGRESS_ENV, "").strip() == "0":
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # closed, or a stand-in without isatty
        return False


def start(
    what: str,
    *,
    unit: str,
    total: int | None = None,
    stream: TextIO | None = None,
) -> Progress:
    """A progress line on standard error, its ticker running, or ``NO_PROGRESS`` where none is
    wanted (decided here, once)."""
    out = sys.stderr if stream is None else stream
    if out is None or not enabled(out):
        return NO_PROGRESS
    shown = Progress(
        out,
        what,
        unit=unit,
        total=total,
        after_s=_seconds(AFTER_ENV, AFTER_S),
        refresh_s=_seconds(EVERY_ENV, REFRESH_S),
        width=_width(out),
    )
    shown.tick()  # at once if it is due at once (tests)
    shown.start_ticker()
    return shown


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value >= 0 else default


def _width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


def describe(what: str, done: int, total: int | None, unit: str, elapsed_s: float) -> str:
    """The line: ``importing 12,345 / 100,000 batches  12%, about 8 s left`` (in ``unit`` "%",
    the share alone: ``building the page  45%, about 20 s left``). Without a total, the count
    alone; without a count yet, the time spent."""
    if total is None:
        if done <= 0:
            return f"{what} ({format_duration(elapsed_s)})"
        return f"{what} {done:,} {unit} ({format_duration(elapsed_s)})"
    done = min(max(done, 0), total)
    percent = 100 * done // total if total else 100
    # A share of the work (unit "%"): its steps' shares, not a count of things.
    line = (
        f"{what}  {percent}%" if unit == "%" else f"{what} {done:,} / {total:,} {unit}  {percent}%"
    )
    left = time_left(done, total, elapsed_s)
    return f"{line}, about {format_duration(left)} left" if left is not None else line


def time_left(done: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the rate so far; None before there is a rate to go by, or once done."""
    if done <= 0 or elapsed_s <= 0 or done >= total:
        return None
    return elapsed_s * (total - done) / done


def format_duration(seconds: float) -> str:
    """``0.4 s``, ``8 s``, ``2 min 05 s``, ``1 h 02 min``."""
    if seconds < 1:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"

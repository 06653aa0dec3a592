"""`cmr.cli.progress`: the line's words, its estimate, when it is drawn (a fake clock) and when
nothing is (not a terminal, or INVOSEQ_PROGRESS=0)."""

from __future__ import annotations

import io

import pytest

from cmr.cli import progress
from cmr.cli.progress import NO_PROGRESS, Progress, describe, format_duration, time_left

ERASE = "\r\x1b[K"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines(stream: io.StringIO) -> list[str]:
    """What each redraw wrote, in order ('' for an erase alone)."""
    return stream.getvalue().split(ERASE)[1:]


def test_counts_percentage_and_time_left() -> None:
    assert describe("importing", 12_345, 100_000, "batches", 10.0) == (
        "importing 12,345 / 100,000 batches  12%, about 1 min 11 s left"
    )
    assert describe("importing", 0, 40, "batches", 3.0) == "importing 0 / 40 batches  0%"
    assert describe("importing", 40, 40, "batches", 3.0) == "importing 40 / 40 batches  100%"


def test_a_share_of_the_work_shows_its_percent_and_the_time_left_alone() -> None:
    """``cmr report`` and ``cmr export`` count their steps' shares of the work, in percent."""
    assert describe("building", 0, 100, "%", 1.0) == "building  0%"
    assert describe("building", 55, 100, "%", 11.0) == "building  55%, about 9 s left"
    assert describe("building", 100, 100, "%", 20.0) == "building  100%"


def test_without_a_total_the_count_or_the_time_spent() -> None:
    assert describe("reading", 0, None, "calls", 2.4) == "reading (2 s)"
    assert describe("reading", 5_000, None, "calls", 0.25) == "reading 5,000 calls (0.2 s)"


def test_time_left_at_the_rate_so_far() -> None:
    assert time_left(25, 100, 5.0) == 15.0
    assert time_left(0, 100, 5.0) is None  # no rate yet
    assert time_left(100, 100, 5.0) is None  # done


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.42, "0.4 s"), (8.4, "8 s"), (125, "2 min 05 s"), (3720, "1 h 02 min")],
)
def test_durations(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_short_work_prints_nothing() -> None:
    clock, out = Clock(), Terminal()
    shown = Progress(out, "importing", unit="batches", total=10, clock=clock, after_s=0.75)
    for done in range(1, 11):
        clock.now += 0.07
        shown.update(done)
    shown.close()

    assert out.getvalue() == ""


def test_drawn_after_the_delay_at_most_every_refresh_then_erased() -> None:
    clock, out = Clock(), Terminal()
    shown = Progress(
        out, "importing", unit="batches", total=80, clock=clock, after_s=1.0, refresh_s=0.25
    )
    for done in range(1, 81):
        clock.now += 0.125
        shown.update(done)
    shown.close()

    drawn = lines(out)
    assert drawn[-1] == ""  # erased at the end: the command's own output starts a clean line
    # 10 s of work, an update every 0.125 s: drawn from 1 s on, every other update
    assert len(drawn) - 1 == 37
    assert drawn[0] == "importing 8 / 80 batches  10%, about 9 s left"
    assert drawn[1] == "importing 10 / 80 batches  12%, about 9 s left"
    assert drawn[-2] == "importing 80 / 80 batches  100%"


def test_a_phase_is_drawn_at_once_once_the_line_shows() -> None:
    clock, out = Clock(), Terminal()
    shown = Progress(out, "report 1/3: reading", unit="calls", clock=clock, after_s=0.5)
    clock.now += 0.6
    shown.tick()
    clock.now += 0.01  # well inside the refresh limit
    shown.phase("report 2/3: building")
    shown.close()

    assert lines(out) == ["report 1/3: reading (0.6 s)", "report 2/3: building (0.0 s)", ""]


def test_the_line_fits_the_terminal() -> None:
    clock, out = Clock(), Terminal()
    shown = Progress(out, "x" * 200, unit="batches", clock=clock, after_s=0, width=40)
    shown.tick()

    assert len(lines(out)[0]) == 39  # one column short: the cursor stays on the line


def test_closed_draws_no_more() -> None:
    clock, out = Clock(), Terminal()
    shown = Progress(out, "pruning", unit="steps", total=14, clock=clock, after_s=0)
    shown.update(1)
    shown.close()
    before = out.getvalue()
    clock.now += 5
    shown.update(2)
    shown.phase("more")
    shown.close()

    assert out.getvalue() == before


def test_not_a_terminal_gets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    assert progress.start("importing", unit="batches", stream=io.StringIO()) is NO_PROGRESS


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")
    assert progress.start("importing", unit="batches", stream=Terminal()) is NO_PROGRESS


def test_a_terminal_gets_a_line_with_its_ticker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    monkeypatch.setenv(progress.AFTER_ENV, "0")
    monkeypatch.setenv(progress.EVERY_ENV, "0")
    out = Terminal()
    shown = progress.start("importing", unit="batches", total=4, stream=out)
    try:
        assert shown is not NO_PROGRESS
        shown.update(1)
    finally:
        shown.close()  # stops and joins its ticker thread

    assert lines(out)[0] == "importing 0 / 4 batches  0%"  # at once, as the delay is 0
    assert any(line.startswith("importing 1 / 4 batches  25%, about ") for line in lines(out))
    assert lines(out)[-1] == ""


def test_the_ticker_follows_a_count_read_elsewhere() -> None:
    clock, out = Clock(), Terminal()
    acknowledged = [0]
    shown = Progress(out, "sending", unit="events", total=400, clock=clock, after_s=0)
    shown.follow(lambda: acknowledged[0])
    acknowledged[0] = 100
    clock.now += 1
    shown.tick_following()

    assert lines(out)[-1] == "sending 100 / 400 events  25%, about 3 s left"


def test_a_count_read_as_the_phase_changes_is_not_the_next_phases() -> None:
    """The ticker reads the count, the work moves on to its next phase, then the count arrives:
    it belongs to the phase that is over."""
    clock, out = Clock(), Terminal()
    shown = Progress(out, "sending", unit="events", total=400, clock=clock, after_s=0)

    moved = []

    def read() -> int:
        if not moved:  # what the main thread does meanwhile, once
            moved.append(True)
            shown.phase("writing the report")
        return 400

    shown.follow(read)
    clock.now += 1
    shown.tick_following()
    clock.now += 1
    shown.tick()

    assert lines(out)[-1] == "writing the report (1 s)"  # not "… 400 events (1 s)"


class GoneTerminal(Terminal):
    def write(self, text: str) -> int:
        self.writes = getattr(self, "writes", 0) + 1
        raise OSError(5, "Input/output error")


def test_a_terminal_gone_away_ends_the_line_not_the_work() -> None:
    clock, out = Clock(), GoneTerminal()
    shown = Progress(out, "importing", unit="batches", total=10, clock=clock, after_s=0)
    for done in range(1, 11):
        clock.now += 1
        shown.update(done)  # raises nothing
    shown.close()

    assert out.writes == 1  # tried once, then left alone

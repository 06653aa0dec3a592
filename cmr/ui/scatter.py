"""The scatter above ``cmr ui``'s list, as SVG: one mark per listed sequence, at its start time
(x) and its duration (y, log scale), coloured by status.

Each mark is a link to the sequence's view, so a click opens it without any script; its
``title`` says what it is. A complete sequence is a filled dot, one whose root raised a red
dot, a running one a hollow green ring at how long it has run so far, and one that will never
end (incomplete: no duration) a cross in the "no end" strip above the plot, at its start.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from cmr.ui.scales import NO_END_Y, PLOT_BOTTOM, PLOT_TOP, LogScale, TimeScale
from cmr.views.render.terms import format_duration, format_time_of_day

WIDTH: Final = 720
PLOT_LEFT: Final = 64
PLOT_RIGHT: Final = WIDTH - 12
DOT_RADIUS: Final = 3.5
_STATUSES: Final = ("complete", "error", "running", "incomplete")


@dataclass(frozen=True, slots=True)
class Dot:
    """One listed sequence as the scatter draws it."""

    seq_hex: str
    root: str
    start_ns: int
    duration_ns: int | None  # so far, when running; None when it will never end
    status: str  # complete | error | running | incomplete


def render_scatter(dots: list[Dot], times: TimeScale, durations: LogScale, href: str) -> str:
    """The scatter's SVG; ``href`` is the view's path with ``{seq}`` for the sequence id."""
    parts = [
        f"<svg id='scatter' viewBox='0 0 {WIDTH} {PLOT_BOTTOM + 30}' role='img'"
        f" aria-label='start time and duration of each listed sequence'"
        f"{_scale_attributes(times, durations)}>",
        "<title>Each listed sequence at its start time (across) and duration (up, log scale):"
        " click a mark to open it, drag a box to filter by its times and durations (along an"
        " axis: by that one only)</title>",
        f"<rect class='plot' x='{PLOT_LEFT}' y='{PLOT_TOP}' width='{PLOT_RIGHT - PLOT_LEFT}'"
        f" height='{PLOT_BOTTOM - PLOT_TOP}'/>",
        _duration_axis(durations),
        _time_axis(times),
    ]
    if any(dot.duration_ns is None for dot in dots):
        parts.append(
            f"<text class='axis no-end' x='{PLOT_LEFT - 6}' y='{NO_END_Y + 4}'"
            " text-anchor='end'><title>sequences that will never end (incomplete: their"
            " process ended or was lost first), at their start</title>no end</text>"
        )
    # The slowest last: drawn on top, where an outlier must not hide under the crowd.
    for dot in sorted(dots, key=lambda d: -1 if d.duration_ns is None else d.duration_ns):
        parts.append(_mark(dot, times, durations, href.replace("{seq}", dot.seq_hex)))
    parts.append("<rect id='brush' x='0' y='0' width='0' height='0' visibility='hidden'/></svg>")
    return "".join(parts)


def _scale_attributes(times: TimeScale, durations: LogScale) -> str:
    """The bounds the page's script needs to turn a drag into times and durations."""
    return (
        f" data-left='{PLOT_LEFT}' data-right='{PLOT_RIGHT}'"
        f" data-first-ms='{times.first_ns / 1e6:.3f}' data-last-ms='{times.last_ns / 1e6:.3f}'"
        f" data-top='{PLOT_TOP}' data-bottom='{PLOT_BOTTOM}'"
        f" data-low-ns='{durations.low_ns}' data-high-ns='{durations.high_ns}'"
    )


def _duration_axis(durations: LogScale) -> str:
    ticks = []
    for tick in durations.ticks():
        y = durations.y(tick)
        line = (PLOT_LEFT, y, PLOT_RIGHT, y)
        ticks.append(_tick(line, (PLOT_LEFT - 6, y + 4), "end", decade_label(tick)))
    return f"<g class='y-axis'>{''.join(ticks)}</g>"


def _time_axis(times: TimeScale) -> str:
    ticks = []
    for tick in times.ticks():
        x = times.x(tick)
        line = (x, PLOT_TOP, x, PLOT_BOTTOM)
        # a label near an end of the axis stays inside the picture
        anchor = "end" if x > WIDTH - 40 else "start" if x < PLOT_LEFT + 30 else "middle"
        ticks.append(_tick(line, (x, PLOT_BOTTOM + 16), anchor, times.label(tick)))
    return f"<g class='x-axis'>{''.join(ticks)}</g>"


def _tick(
    line: tuple[float, float, float, float], at: tuple[float, float], anchor: str, label: str
) -> str:
    """A grid line across the plot and its label at ``at``."""
    x1, y1, x2, y2 = line
    return (
        f"<line class='grid' x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}'/>"
        f"<text class='axis' x='{at[0]:.1f}' y='{at[1]:.1f}' text-anchor='{anchor}'>{label}</text>"
    )


def decade_label(ns: int) -> str:
    """A power of ten of nanoseconds in the largest unit it is a whole number of (10 ms)."""
    for scale, unit in ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs")):
        if ns >= scale:
            return f"{ns // scale:,} {unit}"
    return f"{ns} ns"


def _mark(dot: Dot, times: TimeScale, durations: LogScale, href: str) -> str:
    x = times.x(dot.start_ns)
    status = dot.status if dot.status in _STATUSES else "complete"
    if dot.duration_ns is None:
        lasted = "never ended"
        r = DOT_RADIUS
        shape = (
            f"<path d='M{x - r:.1f},{NO_END_Y - r:.1f}l{2 * r},{2 * r}"
            f"m0,{-2 * r}l{-2 * r},{2 * r}'/>"
        )
    else:
        y = durations.y(dot.duration_ns)
        so_far = " so far" if status == "running" else ""
        lasted = format_duration(dot.duration_ns) + so_far
        radius = DOT_RADIUS + 1 if status == "running" else DOT_RADIUS
        shape = f"<circle cx='{x:.1f}' cy='{y:.1f}' r='{radius}'/>"
    title = f"{dot.root} · {lasted} · {status} · started {format_time_of_day(dot.start_ns)}"
    return (
        f"<a class='dot s-{status}' href='{quote(href)}' data-seq='{dot.seq_hex}'>"
        f"{shape}<title>{html.escape(title)}</title></a>"
    )

"""The histogram beside ``cmr ui``'s scatter, as SVG: how many of the listed sequences that
ended lasted how long, on the scatter's own duration axis (bands of a fifth of a decade, bars
growing to the right), with the 50th, 90th and 99th percentile marked by a line and a label.

Only sequences that ended count (complete, or error: the root raised): a running one has no
final duration yet and an incomplete one never will, as in ``cmr top``, whose nearest-rank
percentile this is (``cmr.views.analyses.top.percentile``), so both give the same p99 for the same
sequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from cmr.ui.scales import NO_END_Y, PLOT_BOTTOM, LogScale
from cmr.views.analyses.top import percentile
from cmr.views.render.terms import format_duration

WIDTH: Final = 250
BAR_LEFT: Final = 4
BAR_RIGHT: Final = 150
LABEL_X: Final = 160
BANDS_PER_DECADE: Final = 5
#: The percentiles marked, as (share, label).
PERCENTILES: Final = ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"))
#: Labels closer than this (SVG units) are moved apart, the higher percentile upwards.
LABEL_GAP: Final = 12


@dataclass(frozen=True, slots=True)
class Band:
    low_ns: int
    high_ns: int
    count: int


@dataclass(frozen=True, slots=True)
class Marker:
    label: str  # p50, p90, p99
    share: float
    ns: int
    y: float  # where the line is
    label_y: float  # where its label is (moved off its neighbours)


def bands(durations: list[int], scale: LogScale) -> list[Band]:
    """The count of durations in each fifth of a decade of ``scale`` (outside ones in the end
    bands)."""
    low = math.log10(scale.low_ns)
    n = round((math.log10(scale.high_ns) - low) * BANDS_PER_DECADE)
    counts = [0] * n
    for duration in durations:
        at = math.floor((math.log10(max(1, duration)) - low) * BANDS_PER_DECADE + 1e-9)
        counts[min(max(at, 0), n - 1)] += 1
    edges = [round(scale.low_ns * 10 ** (k / BANDS_PER_DECADE)) for k in range(n + 1)]
    return [Band(edges[k], edges[k + 1], counts[k]) for k in range(n)]


def markers(durations: list[int], scale: LogScale) -> list[Marker]:
    """The percentile lines, lowest first, their labels at least LABEL_GAP apart."""
    found = []
    for share, label in PERCENTILES:
        ns = percentile(durations, share)
        if ns is not None:
            found.append((label, share, ns, scale.y(ns)))
    placed: list[Marker] = []
    for label, share, ns, y in found:
        label_y = y if not placed else min(y, placed[-1].label_y - LABEL_GAP)
        placed.append(Marker(label, share, ns, y, label_y))
    return placed


def render_histogram(durations: list[int], listed: int, scale: LogScale) -> str:
    """The histogram's SVG for the ``durations`` of the ended ones of ``listed`` sequences."""
    caption = (
        f"<text class='axis caption' x='{BAR_LEFT}' y='{NO_END_Y + 4}'>{len(durations)} of"
        f" {listed} ended<title>the histogram counts the listed sequences that ended (complete"
        " or error): a running one has no final duration yet, an incomplete one never will"
        "</title></text>"
    )
    parts = [
        f"<svg id='histogram' viewBox='0 0 {WIDTH} {PLOT_BOTTOM + 30}' role='img'"
        " aria-label='histogram of the durations of the listed sequences that ended'>",
        caption,
    ]
    found = bands(durations, scale)
    most = max((band.count for band in found), default=0)
    for band in found:
        if not band.count:
            continue
        top, bottom = scale.y(band.high_ns), scale.y(band.low_ns)
        width = max(1.0, (BAR_RIGHT - BAR_LEFT) * band.count / most)
        noun = "sequence" if band.count == 1 else "sequences"
        parts.append(
            f"<rect class='band' x='{BAR_LEFT}' y='{top + 0.5:.1f}'"
            f" width='{width:.1f}' height='{max(1.0, bottom - top - 1):.1f}'"
            f" data-count='{band.count}'><title>{band.count} {noun} lasted"
            f" {format_duration(band.low_ns)} to {format_duration(band.high_ns)}</title></rect>"
        )
    for marker in markers(durations, scale):
        parts.append(_marker(marker, len(durations)))
    if most:
        parts.append(
            f"<text class='axis' x='{BAR_RIGHT}' y='{PLOT_BOTTOM + 16}' text-anchor='end'>"
            f"{most} per band<title>the longest bar: sequences in one fifth of a decade of"
            " durations</title></text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _marker(marker: Marker, ended: int) -> str:
    percent = round(marker.share * 100)
    duration = format_duration(marker.ns)
    return (
        f"<g class='pct' data-pct='{marker.label}' data-ns='{marker.ns}'>"
        f"<title>{marker.label}: {percent}% of the {ended} ended sequences lasted {duration} or"
        " less (nearest rank, as cmr top computes it)</title>"
        f"<line x1='{BAR_LEFT}' x2='{LABEL_X - 4}' y1='{marker.y:.1f}' y2='{marker.y:.1f}'/>"
        f"<text x='{LABEL_X}' y='{marker.label_y + 4:.1f}'>{marker.label} {duration}</text></g>"
    )

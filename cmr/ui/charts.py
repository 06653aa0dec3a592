"""The charts above ``cmr ui``'s list: the scatter of the listed sequences and the histogram of
their durations beside it, drawn on the server from exactly the sequences the list shows (so
they follow every filter, and read without the script).

The script adds what a static page cannot: dragging over the scatter. A box sets the list's
``since``/``until`` (its width) and ``min_ms``/``max_ms`` (its height) and opens the list with
them, every other filter kept; a drag along the time axis (below the plot) sets the times only,
along the duration axis (left of it) the durations only. A click on a mark is its link.
"""

from __future__ import annotations

from typing import Final

from cmr.store.base import SequenceSummary
from cmr.store.listing import duration_of, listed_status
from cmr.ui.histogram import render_histogram
from cmr.ui.query import lasted_ns
from cmr.ui.scales import PLOT_BOTTOM, PLOT_TOP, log_scale, time_scale
from cmr.ui.scatter import PLOT_LEFT, PLOT_RIGHT, Dot, render_scatter

STYLE: Final = """
#charts { display: flex; flex-wrap: wrap; gap: 0 1rem; margin: 0 0 .4rem; }
#charts svg { font: 10px system-ui, sans-serif; fill: var(--muted); height: 250px;
  user-select: none; }
#scatter { flex: 1 1 30rem; max-width: 720px; touch-action: none; cursor: crosshair; }
#histogram { flex: 0 0 250px; }
#charts .plot { fill: none; stroke: var(--line); }
#charts .grid { stroke: var(--line); stroke-width: .5; }
#charts .dot { cursor: pointer; }
#charts .dot circle, #charts .dot path { stroke-width: 1.5; }
.s-complete { fill: var(--accent); stroke: var(--accent); }
.s-error { fill: #c62828; stroke: #c62828; }
.s-running circle { fill: none; stroke: #1b7f3b; stroke-width: 2; }
.s-incomplete path { stroke: #b26a00; fill: none; }
#charts .dot:hover circle { stroke: currentColor; stroke-width: 2; }
#brush { fill: #2a6fdb22; stroke: var(--accent); stroke-dasharray: 3 2; }
#histogram .band { fill: #2a6fdb88; }
#histogram .pct line { stroke: currentColor; stroke-dasharray: 4 2; }
#histogram .pct { color: #6a1b9a; fill: #6a1b9a; font-weight: 600; }
#chart-legend { font-size: .8rem; color: var(--muted); margin: 0 0 .8rem; }
#chart-legend b { font-weight: 600; }
.key-complete { color: var(--accent); }
"""

_LEGEND: Final = (
    "<p id='chart-legend'>"
    "<b class='key-complete'>●</b> complete "
    "<b class='status-error'>●</b> error (the root raised) "
    "<b class='status-running'>○</b> running (how long so far) "
    "<b class='status-incomplete'>&times;</b> incomplete (never ends: no duration) · "
    "click a mark to open it; drag a box to filter by its start times and durations, along an "
    "axis to filter by that one only · the histogram counts the ended ones; p50, p90, p99: "
    "nearest-rank percentiles of their durations, as <a href='/top'>top</a> computes them</p>"
)

#: Drag over the scatter: the same scales as the server's (``scales``), inverted.
SCRIPT: Final = """
(() => {
  const MIN_DRAG = 4;
  let drag = null;
  const point = (svg, event) => {
    const p = svg.createSVGPoint();
    p.x = event.clientX;
    p.y = event.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse());
  };
  const num = (svg, name) => Number(svg.dataset[name]);
  const clamp = (v, lo, hi) => Math.min(Math.max(v, lo), hi);
  function moment(svg, x) {
    const share = (x - num(svg, "left")) / (num(svg, "right") - num(svg, "left"));
    return num(svg, "firstMs") + share * (num(svg, "lastMs") - num(svg, "firstMs"));
  }
  function lastedMs(svg, y) {
    const low = Math.log10(num(svg, "lowNs")), high = Math.log10(num(svg, "highNs"));
    const share = (num(svg, "bottom") - y) / (num(svg, "bottom") - num(svg, "top"));
    return Math.pow(10, low + share * (high - low)) / 1e6;
  }
  function rounded(ms, up) { /* three significant digits, outwards */
    const unit = Math.pow(10, Math.floor(Math.log10(ms)) - 2);
    const units = up ? Math.ceil(ms / unit) : Math.floor(ms / unit);
    return String(Number((units * unit).toPrecision(3)));
  }
  function brushBox(svg, band, a, b) {
    const box = {x0: Math.min(a.x, b.x), x1: Math.max(a.x, b.x),
                 y0: Math.min(a.y, b.y), y1: Math.max(a.y, b.y)};
    if (band === "durations") { box.x0 = num(svg, "left"); box.x1 = num(svg, "right"); }
    if (band === "times") { box.y0 = num(svg, "top"); box.y1 = num(svg, "bottom"); }
    box.x0 = clamp(box.x0, num(svg, "left"), num(svg, "right"));
    box.x1 = clamp(box.x1, num(svg, "left"), num(svg, "right"));
    box.y0 = clamp(box.y0, num(svg, "top"), num(svg, "bottom"));
    box.y1 = clamp(box.y1, num(svg, "top"), num(svg, "bottom"));
    return box;
  }
  document.addEventListener("pointerdown", (event) => {
    const svg = event.target.closest && event.target.closest("#scatter");
    if (!svg || event.button !== 0) return;
    const at = point(svg, event);
    const band = at.x < num(svg, "left") ? "durations"
      : at.y > num(svg, "bottom") ? "times" : at.y < num(svg, "top") ? null : "box";
    if (!band) return;
    event.preventDefault();
    window.invoseqDragging = true; /* the list's refresh waits */
    drag = {svg: svg, band: band, from: at, to: at, moved: false, pointer: event.pointerId};
  });
  document.addEventListener("pointermove", (event) => {
    if (!drag) return;
    drag.to = point(drag.svg, event);
    const dx = Math.abs(drag.to.x - drag.from.x), dy = Math.abs(drag.to.y - drag.from.y);
    if (!drag.moved && Math.max(dx, dy) < MIN_DRAG) return;
    drag.moved = true;
    const box = brushBox(drag.svg, drag.band, drag.from, drag.to);
    const brush = drag.svg.getElementById("brush");
    brush.setAttribute("x", box.x0);
    brush.setAttribute("y", box.y0);
    brush.setAttribute("width", box.x1 - box.x0);
    brush.setAttribute("height", box.y1 - box.y0);
    brush.setAttribute("visibility", "visible");
  });
  document.addEventListener("pointerup", (event) => {
    if (!drag) return;
    const done = drag;
    drag = null;
    window.invoseqDragging = false;
    if (!done.moved) return;
    window.invoseqDragged = true; /* the click that follows is no click on a mark */
    setTimeout(() => { window.invoseqDragged = false; }, 0);
    const svg = done.svg, box = brushBox(svg, done.band, done.from, done.to);
    const url = new URL(location.href);
    const wide = box.x1 - box.x0 >= MIN_DRAG, tall = box.y1 - box.y0 >= MIN_DRAG;
    if (done.band !== "durations" && wide) {
      url.searchParams.set("since", new Date(Math.floor(moment(svg, box.x0))).toISOString());
      url.searchParams.set("until", new Date(Math.ceil(moment(svg, box.x1))).toISOString());
    }
    if (done.band !== "times" && tall) {
      url.searchParams.set("min_ms", rounded(lastedMs(svg, box.y1), false));
      url.searchParams.set("max_ms", rounded(lastedMs(svg, box.y0), true));
    }
    if (url.href !== location.href) location.assign(url.href);
  });
  document.addEventListener("click", (event) => {
    if (window.invoseqDragged && event.target.closest && event.target.closest("#scatter")) {
      event.preventDefault();
    }
  }, true);
  document.addEventListener("dragstart", (event) => {
    if (event.target.closest && event.target.closest("#scatter")) event.preventDefault();
  });
})();
"""


def dots(summaries: list[SequenceSummary], now_ns: int) -> list[Dot]:
    """The listed sequences as the scatter draws them."""
    return [
        Dot(
            summary.seq.hex(),
            summary.root,
            summary.start_ns,
            lasted_ns(summary, now_ns),
            listed_status(summary),
        )
        for summary in summaries
    ]


def render_charts(summaries: list[SequenceSummary], now_ns: int, href: str) -> str:
    """The charts' section (empty when nothing is listed); ``href`` as ``render_scatter``."""
    if not summaries:
        return "<section id='charts'></section>"
    drawn = dots(summaries, now_ns)
    lasted = [dot.duration_ns for dot in drawn if dot.duration_ns is not None]
    durations = log_scale(lasted, PLOT_TOP, PLOT_BOTTOM)
    times = time_scale((dot.start_ns for dot in drawn), PLOT_LEFT, PLOT_RIGHT)
    ended = [d for d in (duration_of(summary) for summary in summaries) if d is not None]
    return (
        "<section id='charts'>"
        f"{render_scatter(drawn, times, durations, href)}"
        f"{render_histogram(ended, len(summaries), durations)}"
        f"</section>{_LEGEND}"
    )

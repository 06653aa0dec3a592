"""One self-contained HTML page from a report model: markup, CSS, JavaScript and the model
inlined, nothing fetched from anywhere.

The page's own Content-Security-Policy allows inline code and data only, so a report opened
from a file can reach no network even if a name or an attribute in it looks like a URL; with
``live_url`` it may fetch from its own origin, which is where ``cmr ui`` serves the model. The
scripts are plain modern JavaScript on ``<canvas>``, concatenated in order: no build step.
"""

from __future__ import annotations

import html
from importlib import resources
from typing import Any, Final

import msgspec

from cmr.report.schema import ReportModel

#: The static assets, inlined in this order (each script uses the ones before it).
SCRIPTS: Final = ("model.js", "timeline.js", "flame.js", "app.js")
STYLES: Final = ("report.css",)
STATUS_RUNNING: Final = "running"

_encode = msgspec.json.Encoder().encode


def render_page(model: ReportModel, *, live_url: str | None = None) -> str:
    """The HTML document of ``model`` (``cmr.report.model.build_model``). With ``live_url`` and
    a sequence still running, the page re-reads the model from ``live_url`` every 2 s."""
    summary = model["summary"]
    running = summary["status"] == STATUS_RUNNING
    live = live_url if running else None
    config = {"liveUrl": live}
    connect = "'self'" if live is not None else "'none'"
    policy = (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        f"img-src data:; connect-src {connect}; base-uri 'none'; form-action 'none'"
    )
    title = f"invoseq · {summary['root']} · {summary['seq'][:12]}"
    return _TEMPLATE.format(
        policy=html.escape(policy, quote=False),  # it holds no double quote
        title=html.escape(title),
        css="\n".join(_asset(name) for name in STYLES),
        model=_script_json(model),
        config=_script_json(config),
        js="\n".join(_asset(name) for name in SCRIPTS),
    )


def _script_json(value: Any) -> str:
    """JSON that cannot end its ``<script>`` element early: every ``<`` is escaped (``\\u003c``
    is the same character to JSON.parse)."""
    return _encode(value).decode().replace("<", "\\u003c")


def _asset(name: str) -> str:
    text = resources.files("cmr.report").joinpath("static", name).read_text(encoding="utf-8")
    if "</script" in text.lower() or "</style" in text.lower():
        raise ValueError(f"static asset {name} would end its element early")
    return text


_TEMPLATE: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="invoseq cmr report">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
<header>
  <div class="bar">
    <div class="title"><span id="root-name"></span><span id="status" class="status"></span>
      <span id="live"
      title="re-read from cmr ui every 2 s while the sequence runs" hidden>live</span></div>
    <div class="tools">
      <input id="search" data-testid="search" type="search" placeholder="Search calls by name"
        autocomplete="off" spellcheck="false" aria-label="Search calls by name">
      <span id="search-count" data-testid="search-count" aria-live="polite"></span>
      <button id="reset" data-testid="reset" type="button">Reset zoom</button>
    </div>
  </div>
  <div id="facts" data-testid="summary"></div>
  <nav class="tabs" role="tablist">
    <button type="button" data-view="timeline" data-testid="tab-timeline"
      class="active">Timeline</button>
    <button type="button" data-view="flame" data-testid="tab-flame">Flame graph</button>
    <button type="button" data-view="icicle" data-testid="tab-icicle">Icicle</button>
  </nav>
</header>
<main>
  <section id="views">
    <canvas id="timeline" data-testid="timeline"></canvas>
    <canvas id="flame" data-testid="flame" hidden></canvas>
    <canvas id="icicle" data-testid="icicle" hidden></canvas>
    <div id="legend">
      <i class="l-measured"></i>measured<i class="l-estimated"></i>estimated from samples
      <i class="l-synthetic"></i>made up<i class="l-error"></i>raised<i class="l-open"></i>not ended
      <i class="l-wait"></i>queue wait, arrow: hand-off<i class="l-critical"></i>critical path
      <i class="l-block"></i>calls under a pixel
      <span class="keys">wheel: zoom · drag: pan · click: details</span>
    </div>
    <div id="flame-note" hidden>Calls and sampled frames merged where the same function sits at
      the same place; width: samples when the sequence has them, else time. Click a frame to
      zoom into it, Reset zoom to go back.</div>
  </section>
  <aside id="details" data-testid="details">
    <h2>Details</h2>
    <p id="details-hint">Click a call on the timeline, or a frame of the flame graph.</p>
    <dl id="details-fields"></dl>
  </aside>
</main>
<div id="tooltip" hidden></div>
<script type="application/json" id="invoseq-model">{model}</script>
<script type="application/json" id="invoseq-config">{config}</script>
<script>
{js}
</script>
</body>
</html>
"""

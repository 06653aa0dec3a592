"""The HTML of ``cmr ui``'s front page: a filter form, the charts of the sequences it selects
(``cmr.ui.charts``: a scatter and a histogram) and their table.

Rendered on the server, so the page works and reads the same without its script; the inline
script only keeps the charts and the table current while a listed sequence is running, by
fetching this same page again and swapping them in (one renderer, no second copy of the
formatting in JavaScript), and lets a drag over the scatter set the filters. Everything is
inline: the page loads nothing from anywhere.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Final
from urllib.parse import quote

from cmr.store.base import KINDS, SORT_DURATION, SequenceSummary
from cmr.store.listing import listed_status
from cmr.ui import charts
from cmr.ui.query import (
    MAX_LIMIT,
    SCAN_WINDOW,
    SORTS,
    STATUSES,
    SequenceFilter,
    filter_query,
    lasted_ns,
    ms_text,
)
from cmr.views.render.tables import SEQ_PREFIX_LEN, format_local_time
from cmr.views.render.terms import format_duration

#: How often the page refreshes its table while a listed sequence is running.
REFRESH_MS: Final = 2000

STYLE: Final = """
:root { color-scheme: light dark; --line: #8884; --muted: #888; --accent: #2a6fdb; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; }
h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
.where { color: var(--muted); margin: 0 0 1rem; }
form { display: flex; flex-wrap: wrap; gap: .6rem 1rem; align-items: end; margin-bottom: 1rem; }
label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
input, select, button { font: inherit; padding: .2rem .4rem; }
input[name=method] { width: 18rem; }
input[type=number] { width: 6rem; }
.error { color: #c62828; font-weight: 600; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3rem .6rem; border-bottom: 1px solid var(--line); }
th { font-size: .8rem; color: var(--muted); font-weight: 600; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.seq { font-family: ui-monospace, monospace; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
.status-running { color: #1b7f3b; font-weight: 600; }
.status-incomplete { color: #b26a00; }
.status-error { color: #c62828; font-weight: 600; }
.lossy { color: #c62828; }
#note { color: var(--muted); font-size: .8rem; }
"""

_SCRIPT: Final = (
    """
(() => {
  const note = document.getElementById("note");
  async function refresh() {
    if (!document.querySelector("#sequences tr[data-status=running]")) {
      note.textContent = "";
      return;
    }
    if (!document.hidden) {
      try {
        const reply = await fetch(location.href, {cache: "no-store"});
        const page = new DOMParser().parseFromString(await reply.text(), "text/html");
        if (window.invoseqDragging) return setTimeout(refresh, REFRESH_MS);
        for (const id of ["charts", "sequences", "count"]) {
          const fresh = page.getElementById(id);
          if (fresh) document.getElementById(id).replaceWith(fresh);
        }
        note.textContent = "updating while a sequence runs";
      } catch (error) {
        note.textContent = "could not refresh: is cmr ui still running?";
      }
    }
    setTimeout(refresh, REFRESH_MS);
  }
  setTimeout(refresh, REFRESH_MS);
})();
"""
).replace("REFRESH_MS", str(REFRESH_MS))

_COLUMNS: Final = (
    ("Sequence", "seq"),
    ("Root", ""),
    ("Start", ""),
    ("Duration", "num"),
    ("Calls", "num"),
    ("Threads", "num"),
    ("Processes", "num"),
    ("Status", ""),
    ("Lossy", ""),
)


def page_start(name: str, where: str, style: str = "") -> list[str]:
    """The head and heading every page of ``cmr ui`` opens with: ``name`` in its title and
    heading, ``where`` (HTML) the line under the heading, ``style`` more CSS of its own."""
    return [
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>invoseq — {name}</title>",
        "<link rel='icon' href='data:,'>",  # no favicon request
        f"<style>{STYLE}{style}</style></head><body>",
        f"<h1>invoseq {name}</h1>",
        f"<p class='where'>{where}</p>",
    ]


def render_list_page(
    summaries: list[SequenceSummary],
    wanted: SequenceFilter,
    *,
    repository: str,
    now_ns: int,
    error: str | None = None,
    short_ids: Mapping[bytes, str] | None = None,
) -> str:
    """The whole front page. ``error`` (a query the user got wrong) replaces the table.
    ``short_ids``: the prefix of each id to show (``Store.short_ids``), as ``cmr ls`` prints it;
    without, its first SEQ_PREFIX_LEN digits."""
    where = f"repository {escaped(repository)}"
    parts = [*page_start("sequences", where, charts.STYLE), _form(wanted)]
    if error is not None:
        parts.append(f"<p id='count' class='error'>{escaped(error)}</p>")
    else:
        parts.append(_count(len(summaries), wanted))
        parts.append(charts.render_charts(summaries, now_ns, sequence_path(b"") + "{seq}"))
        parts.append(_table(summaries, now_ns, short_ids or {}))
    parts.append("<p id='note'></p>")
    parts.append(f"<script>{_SCRIPT}{charts.SCRIPT}</script></body></html>\n")
    return "".join(parts)


def sequence_path(seq: bytes) -> str:
    """Where a sequence's view is served."""
    return f"/seq/{seq.hex()}"


def _form(wanted: SequenceFilter) -> str:
    options = _options(STATUSES, wanted.status)
    sorts = "".join(
        f"<option value='{sort}'{' selected' if sort == wanted.sort else ''}>{label}</option>"
        for sort, label in zip(SORTS, ("newest first", "longest first"), strict=True)
    )
    return (
        "<form id='filter' method='get' action='/'>"
        "<label>Root (shell pattern)"
        f"<input name='root' value='{escaped(wanted.root)}' placeholder='shop.*'>"
        "</label>"
        "<label>Method (module.qualname or qualname)"
        f"<input name='method' value='{escaped(wanted.method)}' placeholder='shop.checkout'>"
        "</label>"
        "<label>Min duration (ms)"
        f"<input name='min_ms' type='number' min='0' step='any' value='{ms_text(wanted.min_ns)}'>"
        "</label>"
        "<label>Max duration (ms)"
        f"<input name='max_ms' type='number' min='0' step='any' value='{ms_text(wanted.max_ns)}'>"
        "</label>"
        f"<label>Status<select name='status'><option value=''>any</option>{options}</select>"
        "</label>"
        "<label>Since (90m, 1d or ISO time)"
        f"<input name='since' value='{escaped(wanted.since)}' placeholder='1h'>"
        "</label>"
        "<label>Until"
        f"<input name='until' value='{escaped(wanted.until)}' placeholder='10m'>"
        "</label>"
        "<label>Host"
        f"<input name='host' value='{escaped(wanted.host)}' placeholder='web-1'>"
        "</label>"
        f"<label>Order<select name='sort'>{sorts}</select></label>"
        f"<label>Kind<select name='kind'>{_options(KINDS, wanted.kind)}</select></label>"
        "<label>Show at most"
        f"<input name='limit' type='number' min='1' max='{MAX_LIMIT}' value='{wanted.limit}'>"
        "</label>"
        "<button type='submit'>Filter</button> <a href='/'>clear</a>"
        " · <a href='/top'>top</a>"
        f" · <a id='map-link' href='/map?{escaped(filter_query(wanted))}'>map</a>"
        "</form>"
    )


def _options(values: tuple[str, ...], chosen: str) -> str:
    return "".join(
        f"<option value='{value}'{' selected' if value == chosen else ''}>{value}</option>"
        for value in values
    )


def _count(shown: int, wanted: SequenceFilter) -> str:
    noun = "sequence" if shown == 1 else "sequences"
    order = "longest first" if wanted.sort == SORT_DURATION else "newest first"
    # Only the method filter looks through a window; the others are the repository's indexes.
    scope = f", among the {SCAN_WINDOW} most recent" if wanted.method else ""
    title = (
        "the sequences the filters select, at most 'Show at most' of them: the table lists them"
        " and the charts draw them"
    )
    return f"<p id='count' title='{escaped(title)}'>{shown} {noun}, {order}{scope}</p>"


#: What each column counts, on hover (its ``title``).
_COLUMN_TITLES: Final = {
    "Sequence": "the sequence id (the W3C trace-id), its shortest unique prefix",
    "Root": "the call the sequence started with (a request's route, or a traced function)",
    "Start": "when its first call started, local time",
    "Duration": "its root call's duration; a running one: how long it has run so far",
    "Calls": "the traced calls (invocations) in it, across all its threads and processes",
    "Threads": "the threads its calls ran on",
    "Processes": "the processes its calls ran in",
    "Status": "its root call's: complete, error (complete, and the root raised), running, or "
    "incomplete (the root will never end: its process ended or was lost)",
    "Lossy": "lossy: the tracer dropped some of its events; what is shown is what arrived",
}


def _table(summaries: list[SequenceSummary], now_ns: int, short_ids: Mapping[bytes, str]) -> str:
    head = "".join(
        f"<th{' class=num' if css == 'num' else ''}"
        f" title='{escaped(_COLUMN_TITLES[title])}'>{title}</th>"
        for title, css in _COLUMNS
    )
    rows = "".join(_row(summary, now_ns, short_ids.get(summary.seq)) for summary in summaries)
    if not summaries:
        rows = f"<tr><td colspan='{len(_COLUMNS)}'>no sequences match</td></tr>"
    return f"<table id='sequences'><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _row(summary: SequenceSummary, now_ns: int, short_id: str | None) -> str:
    href = quote(sequence_path(summary.seq))
    status = listed_status(summary)
    seq_hex = summary.seq.hex()
    cells = [
        f"<a href='{href}' title='{seq_hex}'>{short_id or seq_hex[:SEQ_PREFIX_LEN]}</a>",
        f"<a href='{href}'>{escaped(summary.root)}</a>",
        format_local_time(summary.start_ns),
        _duration(summary, now_ns),
        str(summary.invocations),
        str(summary.threads),
        str(summary.processes),
        f"<span class='status-{status}'>{status}</span>",
        "<span class='lossy'>lossy</span>" if summary.lossy else "",
    ]
    tds = "".join(
        f"<td class='{css or name.lower()}'>{cell}</td>"
        for (name, css), cell in zip(_COLUMNS, cells, strict=True)
    )
    return f"<tr data-seq='{seq_hex}' data-status='{escaped(summary.status)}'>{tds}</tr>"


def _duration(summary: SequenceSummary, now_ns: int) -> str:
    """A running sequence shows how long it has run so far; one that never ended, a dash."""
    lasted = lasted_ns(summary, now_ns)
    if lasted is None:
        return "-"
    return format_duration(lasted) + (" so far" if summary.end_ns is None else "")


def escaped(value: str) -> str:
    return html.escape(value, quote=True)

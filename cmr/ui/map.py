"""``cmr ui``'s map page: ``cmr map`` drawn as SVG, over the sequences the list's filters select.

The page takes the list page's query parameters (``cmr.ui.query``: root, method, durations,
status, since, until, host, kind, limit) and reads the newest ``limit`` sequences they select,
``views.analyses.services.DEFAULT_LIMIT`` when no limit is given (the list page's map link passes
its filters, and its limit only when it is not the list's default). Each edge is a link to a list
of its sequences further down the same page, shown when it is the page's target (CSS
``:target``: no script), each linking to the sequence's view. Below the drawing, the edges'
table is ``cmr map``'s, each row linking to the same list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import quote

from cmr.store.base import SequenceSummary, Store
from cmr.store.listing import listed_status
from cmr.ui.listing import escaped, page_start, sequence_path
from cmr.ui.maplayout import Box, Curve, Layout, layout
from cmr.ui.query import SequenceFilter, filter_query, lasted_ns, parse_filter, select_sequences
from cmr.views.analyses.services import DEFAULT_LIMIT, Edge, ServiceMap, mapped
from cmr.views.render.tables import SEQ_PREFIX_LEN, format_local_time
from cmr.views.render.terms import format_duration, plural

_STYLE: Final = """
svg#map { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
svg#map .box rect { fill: Canvas; stroke: var(--accent); stroke-width: 1.5; }
svg#map .box.entry rect { stroke-width: 3; }
svg#map .box text { fill: CanvasText; font-size: 14px; text-anchor: middle; }
svg#map .box text.program { fill: var(--muted); font-size: 11px; }
svg#map .edge path { fill: none; stroke: var(--muted); stroke-width: 1.6; }
svg#map .edge path.hit { stroke: transparent; stroke-width: 14; }
svg#map .edge.errors path.line { stroke: #c62828; }
svg#map .edge:hover path.line { stroke: var(--accent); stroke-width: 3; }
svg#map .edge text { fill: CanvasText; font-size: 12px; text-anchor: middle;
  paint-order: stroke; stroke: Canvas; stroke-width: 4px; }
svg#map marker path { fill: var(--muted); }
.edge-list { display: none; margin-top: 1rem; }
.edge-list h2 { font-size: 1rem; margin: 0 0 .2rem; white-space: pre-wrap; }
.edge-list:target { display: block; }
"""


def parse_map(query: Mapping[str, Sequence[str]]) -> SequenceFilter:
    """The list's filter (``parse_filter``: raises QueryError), reading ``DEFAULT_LIMIT``
    sequences when the query gives no limit."""
    wanted = parse_filter(query)
    if not any(value.strip() for value in query.get("limit", ())):
        wanted = dataclasses.replace(wanted, limit=DEFAULT_LIMIT)
    return wanted


def map_of(store: Store, wanted: SequenceFilter, now_ns: int) -> ServiceMap:
    """The map of the newest ``wanted.limit`` sequences the list's filters select."""
    lines = select_sequences(store, dataclasses.replace(wanted, limit=wanted.limit + 1), now_ns)
    return mapped(
        store, lines[: wanted.limit], limit=wanted.limit, bounded=len(lines) > wanted.limit
    )


def render_map_page(
    found: ServiceMap | None,
    wanted: SequenceFilter,
    *,
    repository: str,
    now_ns: int,
    error: str | None = None,
) -> str:
    """The whole map page; ``error`` (a query the user got wrong) replaces the map."""
    filters = filter_query(dataclasses.replace(wanted, limit=50))
    where = (
        f"repository {escaped(repository)} · <a id='list-link' href='/?{escaped(filters)}'>"
        "sequences</a> · <a href='/top'>top</a>"
    )
    parts = [*page_start("map", where), f"<style>{_STYLE}</style>"]
    if error is not None or found is None:
        parts.append(f"<p id='count' class='error'>{escaped(error or '')}</p>")
    else:
        parts.append(_count(found, wanted))
        if found.nodes:
            drawn = layout(found)
            parts.append(_svg(drawn))
            parts.append(_edge_table(drawn.curves))
            summaries = {line.seq: line for line in found.sequences}
            parts.extend(
                _edge_list(at, curve.edge, summaries, now_ns)
                for at, curve in enumerate(drawn.curves)
            )
    parts.append("</body></html>\n")
    return "".join(parts)


def _count(found: ServiceMap, wanted: SequenceFilter) -> str:
    read = len(found.sequences)
    if not read:
        return "<p id='count'>no sequences match</p>"
    scope = ", the filters' newest: limit=N reads more (up to 1000)" if found.bounded else ""
    where = " the filters select" if wanted.filters else ""
    services, edges = plural(len(found.nodes), "service"), plural(len(found.edges), "edge")
    return (
        f"<p id='count'>{services} and {edges} over {plural(read, 'sequence')}{where}{scope}. "
        "Click an edge to list its sequences.</p>"
    )


def _svg(drawn: Layout) -> str:
    marker = (
        "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='9' "
        "markerHeight='9' markerUnits='userSpaceOnUse' orient='auto-start-reverse'>"
        "<path d='M0,0 L10,5 L0,10 z'/></marker></defs>"
    )
    edges = "".join(_edge(at, curve) for at, curve in enumerate(drawn.curves))
    boxes = "".join(_box(box) for box in drawn.boxes.values())
    return (
        f"<svg id='map' xmlns='http://www.w3.org/2000/svg' width='{drawn.width:.0f}' "
        f"height='{drawn.height:.0f}' viewBox='0 0 {drawn.width:.0f} {drawn.height:.0f}' "
        f"role='img' aria-label='service map'>{marker}{edges}{boxes}</svg>"
    )


def _box(box: Box) -> str:
    x, y = box.centre
    program = (
        ""
        if box.program == box.name
        else f"<text class='program' x='{x:.1f}' y='{y + 15:.1f}'>{escaped(box.program)}</text>"
    )
    return (
        f"<g class='{'box entry' if box.entry else 'box'}' data-service='{escaped(box.name)}'>"
        f"<rect x='{box.x:.1f}' y='{box.y:.1f}' width='{box.width:.1f}' "
        f"height='{box.height:.1f}' rx='6'/>"
        f"<text x='{x:.1f}' y='{y + (-2 if program else 5):.1f}'>{escaped(box.name)}</text>"
        f"{program}</g>"
    )


def _edge(at: int, curve: Curve) -> str:
    edge = curve.edge
    css = "edge errors" if edge.errors else "edge"
    label = f"{edge.kind} · {edge.count:,}" + (f" · {edge.errors:,} err" if edge.errors else "")
    return (
        f"<a class='{css}' href='#edge-{at}' data-source='{escaped(edge.source)}' "
        f"data-target='{escaped(edge.target)}' data-kind='{escaped(edge.kind)}' "
        f"data-count='{edge.count}'><title>{escaped(_summary(edge))}</title>"
        f"<path class='hit' d='{curve.path}'/>"
        f"<path class='line' d='{curve.path}' marker-end='url(#arrow)'/>"
        f"<text x='{curve.label_x:.1f}' y='{curve.label_y:.1f}'>{escaped(label)}</text></a>"
    )


def _summary(edge: Edge) -> str:
    """An edge in one line, as ``cmr map`` prints it."""
    times = [
        ("p50", edge.percentile(0.5)),
        ("p99", edge.percentile(0.99)),
        ("queued p50", edge.queued_p50),
    ]
    shown = "  ".join(f"{name} {format_duration(t)}" for name, t in times if t is not None)
    errors = f"{edge.errors:,} error{'' if edge.errors == 1 else 's'}"
    calls = f"{edge.count:,} call{'' if edge.count == 1 else 's'}"
    return f"{edge.source} → {edge.target}  {edge.kind}  {calls}  {errors}  {shown}"


def _edge_table(curves: list[Curve]) -> str:
    titles = ["Edge", "Kind", "Calls", "Errors", "p50", "p99", "Queued p50"]
    head = "".join(
        f"<th class='num'>{title}</th>" if at > 1 else f"<th>{title}</th>"
        for at, title in enumerate(titles)
    )
    rows = []
    for at, curve in enumerate(curves):
        edge = curve.edge
        times = [edge.percentile(0.5), edge.percentile(0.99), edge.queued_p50]
        cells = [
            f"<a href='#edge-{at}'>{escaped(edge.source)} → {escaped(edge.target)}</a>",
            escaped(edge.kind),
            f"{edge.count:,}",
            f"{edge.errors:,}",
            *("-" if t is None else format_duration(t) for t in times),
        ]
        tds = "".join(
            f"<td class='num'>{cell}</td>" if i > 1 else f"<td>{cell}</td>"
            for i, cell in enumerate(cells)
        )
        rows.append(f"<tr>{tds}</tr>")
    if not rows:
        rows.append(f"<tr><td colspan='{len(titles)}'>no hand-off between services</td></tr>")
    return f"<table id='edges'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _edge_list(at: int, edge: Edge, summaries: Mapping[bytes, SequenceSummary], now_ns: int) -> str:
    """The sequences an edge was seen in, newest first, each linking to its view."""
    rows = []
    for seq in edge.seqs:
        line = summaries[seq]
        lasted = lasted_ns(line, now_ns)
        href = quote(sequence_path(seq))
        rows.append(
            f"<tr data-seq='{seq.hex()}'><td class='seq'><a href='{href}' title='{seq.hex()}'>"
            f"{seq.hex()[:SEQ_PREFIX_LEN]}</a></td><td><a href='{href}'>{escaped(line.root)}</a>"
            f"</td><td>{format_local_time(line.start_ns)}</td><td class='num'>"
            f"{'-' if lasted is None else format_duration(lasted)}</td>"
            f"<td>{listed_status(line)}</td></tr>"
        )
    noun = "sequence" if len(edge.seqs) == 1 else "sequences"
    return (
        f"<section class='edge-list' id='edge-{at}'><h2>{escaped(_summary(edge))}</h2>"
        f"<p>in {len(edge.seqs)} {noun}, newest first</p><table><thead><tr><th>Sequence</th>"
        "<th>Root</th><th>Start</th><th class='num'>Duration</th><th>Status</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )

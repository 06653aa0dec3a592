"""``cmr ui``'s top page: ``cmr top``'s table, one row per root or per traced method, over the
sequences of a window; the form takes the same ``since``, ``root``, ``by`` and ``limit``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, urlencode

from cmr.ages import moment_ns
from cmr.store.base import KIND_REQUEST, SequenceQuery, Store
from cmr.ui.listing import escaped, page_start
from cmr.ui.query import QueryError, single
from cmr.views.analyses.top import TopRow, row_cells, summed_up

BY: Final = ("root", "method")
#: Sequences summed up per page: all of a window by root (up to this), the newest by method.
ROOT_LIMIT: Final = 100_000
METHOD_LIMIT: Final = 200
_PARAMETERS: Final = frozenset({"since", "root", "by"})


@dataclass(frozen=True, slots=True)
class TopQuery:
    since: str = ""
    root: str = ""
    by: str = "root"


def parse_top(query: Mapping[str, Sequence[str]]) -> TopQuery:
    """The top query a query string asks for. Raises QueryError."""
    unknown = sorted(set(query) - _PARAMETERS)
    if unknown:
        raise QueryError(f"unknown parameter '{unknown[0][:40]}' (expected: by, root, since)")
    values = {name: single(query, name) for name in _PARAMETERS}
    if values["by"] and values["by"] not in BY:
        raise QueryError(f"by: expected root or method, got '{values['by'][:40]}'")
    if values["since"]:
        try:
            moment_ns(values["since"])
        except ValueError as exc:
            raise QueryError(f"since: {exc}") from None
    return TopQuery(values["since"], values["root"][:1000], values["by"] or "root")


def top_rows(store: Store, wanted: TopQuery, now_ns: int) -> list[TopRow]:
    """``cmr top``'s rows for the query."""
    query = SequenceQuery(
        root=wanted.root or None,
        since_ns=moment_ns(wanted.since, now_ns) if wanted.since else None,
        kind=KIND_REQUEST,  # as cmr top: a process's service sequences left out
    )
    limit = METHOD_LIMIT if wanted.by == "method" else ROOT_LIMIT
    return summed_up(store, query, wanted.by, limit)


def render_top_page(
    rows: list[TopRow], wanted: TopQuery, *, repository: str, error: str | None = None
) -> str:
    """The whole top page; ``error`` (a query the user got wrong) replaces the table."""
    where = f"repository {escaped(repository)} · <a href='/'>sequences</a>"
    parts = [*page_start("top", where), _form(wanted)]
    if error is not None:
        parts.append(f"<p id='count' class='error'>{escaped(error)}</p>")
    else:
        parts.append(_about(wanted))
        parts.append(_table(rows, wanted))
    parts.append("</body></html>\n")
    return "".join(parts)


def _form(wanted: TopQuery) -> str:
    options = "".join(
        f"<option value='{by}'{' selected' if by == wanted.by else ''}>per {by}</option>"
        for by in BY
    )
    return (
        "<form id='top' method='get' action='/top'>"
        "<label>Since (90m, 1d or ISO time)"
        f"<input name='since' value='{escaped(wanted.since)}' placeholder='1h'></label>"
        "<label>Root (shell pattern)"
        f"<input name='root' value='{escaped(wanted.root)}' placeholder='shop.*'></label>"
        f"<label>Rows<select name='by'>{options}</select></label>"
        "<button type='submit'>Show</button></form>"
    )


_ENDED: Final = "nearest rank over the durations of those that ended (not a running one)"
#: What each column counts, on hover (its ``title``): per root, and per method where it differs.
_TITLES: Final = {
    "Name": "the root call's name; click it for its sequences, the slowest first",
    "Count": "the sequences of the window with this root",
    "Errors": "of those sequences, the ones whose root call raised",
    "p50": f"half of them lasted this long or less: {_ENDED}",
    "p90": f"90% of them lasted this long or less: {_ENDED}",
    "p99": f"99% of them lasted this long or less: {_ENDED}",
    "Max": "the longest of those that ended",
}
_METHOD_TITLES: Final = {
    "Name": "the traced method (module.qualname)",
    "Count": "its calls (traced, not estimated from stack samples) in the sequences read",
    "Errors": "of its calls, the ones that raised",
    "Self": "its calls' self time added up: their durations less the time their callees covered",
}


def _about(wanted: TopQuery) -> str:
    """What the table sums up, in one visible line."""
    if wanted.by == "method":
        scope = (
            f"the calls of each traced method in the newest {METHOD_LIMIT} sequences of the window"
        )
    else:
        scope = f"the sequences of each root in the window (the newest {ROOT_LIMIT:,} at most)"
    return (
        f"<p id='about' class='where'>Sums up {scope}; services' own sequences left out. "
        "p50, p90, p99: nearest-rank percentiles of the durations that ended; Errors: raised."
        "</p>"
    )


def _table(rows: list[TopRow], wanted: TopQuery) -> str:
    per_method = wanted.by == "method"
    titles = ["Name", "Count", "Errors", "p50", "p90", "p99", "Max"] + (["Self"] * per_method)
    meaning = {**_TITLES, **_METHOD_TITLES} if per_method else _TITLES
    head = "".join(
        f"<th{' class=num' if at else ''} title='{escaped(meaning[title])}'>{title}</th>"
        for at, title in enumerate(titles)
    )
    body = "".join(_row(row, wanted, per_method=per_method) for row in rows)
    if not rows:
        body = f"<tr><td colspan='{len(titles)}'>no sequences match</td></tr>"
    return f"<table id='top-rows'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _row(row: TopRow, wanted: TopQuery, *, per_method: bool) -> str:
    name = escaped(row.name)
    if not per_method:  # a root's row links to its sequences, slowest first
        filters = {"root": row.name, "since": wanted.since, "sort": "duration"}
        name = (
            f"<a href='/?{escaped(urlencode({k: v for k, v in filters.items() if v}))}'>{name}</a>"
        )
    cells = [name, *row_cells(row, with_self=per_method)]
    tds = "".join(
        f"<td class='num'>{cell}</td>" if at else f"<td>{cell}</td>"
        for at, cell in enumerate(cells)
    )
    return f"<tr data-name='{escaped(quote(row.name))}'>{tds}</tr>"

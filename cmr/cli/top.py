"""``cmr top``: one row per root, or per traced method, over many sequences."""

from __future__ import annotations

import argparse
from typing import Final

from cmr.cli.common import (
    Commands,
    add_read_options,
    command,
    emit,
    open_for_reading,
    positive_int,
)
from cmr.cli.ls import add_kind_option, add_root_option, add_since_option
from cmr.store.base import SequenceQuery
from cmr.views.analyses.top import TopRow, row_cells, summed_up
from cmr.views.render import json as json_render
from cmr.views.render.tables import table

#: How many sequences --by root sums up at most (the newest of the window), unless --limit says.
DEFAULT_ROOT_LIMIT: Final = 100_000
#: How many sequences --by method reads at most: each is its whole call tree.
DEFAULT_METHOD_LIMIT: Final = 500


def add_top(commands: Commands) -> None:
    parser = command(
        commands,
        "top",
        description=(
            "Sum up the sequences that started in a window (--since, default: all), one row per "
            "root call's name: how many, how many raised at the root (errors), the 50th, 90th "
            "and 99th percentile and the maximum of their durations, the slowest (p99) first. "
            "With --by method, one row per traced method across those sequences' calls, with "
            "the total of their self time too (each sequence's calls are read: at most --limit "
            f"sequences, the newest, {DEFAULT_METHOD_LIMIT} by default). Percentiles are "
            "nearest-rank over what ended. JSON is a list of rows with 'name', 'count', "
            "'errors', 'p50_ns', 'p90_ns', 'p99_ns', 'max_ns' (and 'self_ns' per method)."
        ),
        examples=[
            "cmr top --since 1h",
            "cmr top --since 1h --root 'shop.*' --by method",
            "cmr top --json | jq '.[] | select(.name == \"shop.checkout\") | .p99_ns'",
        ],
        handler=_top,
    )
    add_since_option(parser)
    add_kind_option(parser)
    add_root_option(parser)
    parser.add_argument(
        "--by",
        choices=("root", "method"),
        default="root",
        help="one row per root (the default), or per traced method across the sequences' calls",
    )
    parser.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help=f"sum up the newest N sequences at most (default: {DEFAULT_ROOT_LIMIT:,} by root, "
        f"{DEFAULT_METHOD_LIMIT} by method)",
    )
    add_read_options(parser)


def _top(args: argparse.Namespace) -> int:
    query = SequenceQuery(root=args.root, since_ns=args.since_ns, kind=args.kind)
    by_methods = args.by == "method"
    limit = args.limit or (DEFAULT_METHOD_LIMIT if by_methods else DEFAULT_ROOT_LIMIT)
    store = open_for_reading(args.db)
    try:
        rows = summed_up(store, query, args.by, limit)
    finally:
        store.close()
    if args.json:
        emit(json_render.top_to_json(rows, with_self=by_methods))
    elif not rows:
        emit("no sequence matches")
    else:
        emit(_table(rows, with_self=by_methods))
    return 0


def _table(rows: list[TopRow], *, with_self: bool) -> str:
    header = ["NAME", "COUNT", "ERRORS", "P50", "P90", "P99", "MAX"]
    if with_self:
        header.append("SELF")
    cells = [[row.name, *row_cells(row, with_self=with_self)] for row in rows]
    return table(header, cells, right=frozenset(range(1, len(header))))

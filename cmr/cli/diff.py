"""``cmr diff``: two sequences compared call path by call path."""

from __future__ import annotations

import argparse

from cmr.cli.common import (
    Commands,
    add_read_options,
    command,
    emit,
    non_negative_int,
    open_for_reading,
)
from cmr.views.analyses.diff import PathDelta, diff_paths
from cmr.views.pipeline import view_sequence
from cmr.views.render import json as json_render
from cmr.views.render.tables import table
from cmr.views.render.terms import format_duration

#: Rows printed unless --limit says otherwise (--json writes them all).
DEFAULT_LIMIT = 40


def add_diff(commands: Commands) -> None:
    parser = command(
        commands,
        "diff",
        description=(
            "Compare two sequences (usually two runs of the same request) call path by call "
            "path: a path is the chain of names from the root ('checkout/fetch/parse'), a name "
            "called more than once by the same caller numbered from its second call in start "
            "order ('checkout/fetch#2'). For each path: its time in A and in B and the "
            "difference, largest change first; a call in only one of them is marked 'only in "
            "A' or 'only in B' and changes by its whole time. JSON is a list of {\"path\", "
            '"a_ns", "b_ns", "delta_ns"}, a_ns or b_ns null where the call is not there or has '
            "not ended."
        ),
        examples=[
            "cmr diff 3f2a9c 77b01e",
            "cmr diff 3f2a9c 77b01e --limit 10",
            "cmr diff 3f2a9c 77b01e --json | jq '.[0]'",
        ],
        handler=_diff,
    )
    parser.add_argument("seq_a", metavar="SEQ_A", help="the sequence to compare from (A)")
    parser.add_argument("seq_b", metavar="SEQ_B", help="the sequence to compare with (B)")
    parser.add_argument(
        "--limit",
        type=non_negative_int,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"print the N largest changes (default: {DEFAULT_LIMIT}; 0: every path; --json "
        "writes every path)",
    )
    add_read_options(parser)


def _diff(args: argparse.Namespace) -> int:
    store = open_for_reading(args.db)
    try:
        seq_a = store.resolve_sequence(args.seq_a)
        seq_b = store.resolve_sequence(args.seq_b)
        tree_a = view_sequence(store, seq_a, None, 0)
        tree_b = view_sequence(store, seq_b, None, 0)
    finally:
        store.close()
    rows = diff_paths(tree_a.root, tree_b.root)
    if args.json:
        emit(json_render.diff_to_json(rows))
        return 0
    shown = rows if not args.limit else rows[: args.limit]
    lines = [f"A {seq_a.hex()}  {_total(tree_a.root.duration_ns)}"]
    lines.append(f"B {seq_b.hex()}  {_total(tree_b.root.duration_ns)}")
    lines.append(
        table(
            ["PATH", "A", "B", "CHANGE", ""],
            [_cells(row) for row in shown],
            right=frozenset({1, 2, 3}),
        )
    )
    if len(shown) < len(rows):
        lines.append(f"… {len(rows) - len(shown):,} more paths: --limit 0 prints them all")
    emit("\n".join(lines))
    return 0


def _total(duration_ns: int | None) -> str:
    return "running" if duration_ns is None else format_duration(duration_ns)


def _cells(row: PathDelta) -> list[str]:
    note = "only in A" if not row.in_b else "only in B" if not row.in_a else ""
    delta = row.delta_ns
    change = ("+" if delta > 0 else "-" if delta < 0 else "") + format_duration(abs(delta))
    return [row.path, _time(row.a_ns, row.in_a), _time(row.b_ns, row.in_b), change, note]


def _time(ns: int | None, present: bool) -> str:
    if not present:
        return "—"
    return "running" if ns is None else format_duration(ns)

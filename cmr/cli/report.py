"""``cmr report``: one sequence as a self-contained HTML page — timeline lanes across processes
and threads, hand-off arrows, flame graph and icicle — that opens in a browser with no network.
"""

from __future__ import annotations

import argparse
import sys

from cmr.cli.common import (
    DB_HELP,
    STDIO,
    Commands,
    add_all_option,
    command,
    read_sequence,
    write_output,
)
from cmr.cli.progress import HELP as PROGRESS_HELP


def add_report(commands: Commands) -> None:
    parser = command(
        commands,
        "report",
        description=(
            "Write one sequence as a single HTML file to open in a browser, with nothing "
            "fetched from the network: a timeline with a lane per process and thread, calls "
            "nested by depth (measured solid, estimated from samples hatched, calls that raised "
            "outlined in red), an arrow per hand-off with its queue wait shaded, and a flame "
            "graph and an icicle of the merged samples (of time, without samples). Zoom with "
            "the wheel, pan by dragging, search by name, click a call for its details. "
            + PROGRESS_HELP
        ),
        examples=[
            "cmr report 3f2a9c -o checkout.html",
            "cmr report 3f2a9c -o - > checkout.html",
            "cmr --db /tmp/shop.sqlite report 3f2a9c -o checkout.html",
        ],
        handler=_report,
    )
    parser.add_argument("seq", metavar="SEQ", help="sequence id, or any unambiguous hex prefix")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        required=True,
        help="the HTML file to write ('-': standard output)",
    )
    add_all_option(parser)
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def _report(args: argparse.Namespace) -> int:
    from cmr.cli import progress
    from cmr.report import build_model, render_page
    from cmr.views.tree.hops import fold_empty_hops

    shown = progress.start("report 1/3: reading the sequence", unit="calls")
    try:
        data = read_sequence(args.db, args.seq)
        calls = len(data.invocations)
        shown.phase(f"report 2/3: building the page of {calls:,} calls", unit="%", total=100)
        if not args.all_calls:
            data = fold_empty_hops(data)
        page = render_page(build_model(data, on_step=shown.update)).encode()
        if args.output == STDIO:
            shown.close()  # the page goes where the line may be: the line goes first
        shown.phase(f"report 3/3: writing {args.output}")
        write_output(args.output, page, binary=False)
    finally:
        shown.close()
    if args.output != STDIO:
        print(f"cmr: wrote {args.output}: open it in a browser", file=sys.stderr)
    return 0

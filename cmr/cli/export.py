"""``cmr export``: one sequence in a format other tools open, or as a bundle."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from cmr.cli.common import (
    DB_HELP,
    STDIO,
    CliError,
    Commands,
    add_all_option,
    command,
    read_sequence,
    write_output,
)
from cmr.cli.progress import HELP as PROGRESS_HELP
from cmr.exports import FORMATS, NAMES
from cmr.views.render.folded import WEIGHTS


def add_export(commands: Commands) -> None:
    parser = command(
        commands,
        "export",
        description=(
            "Write one sequence in a format other tools open: "
            + _listed(f"'{fmt.name}' ({fmt.summary})" for fmt in FORMATS)
            + ". Text formats go to standard output without -o. "
            + PROGRESS_HELP
        ),
        examples=[example for fmt in FORMATS for example in fmt.examples],
        handler=_export,
    )
    parser.add_argument("seq", metavar="SEQ", help="sequence id, or any unambiguous hex prefix")
    parser.add_argument(
        "--format",
        required=True,
        choices=NAMES,
        metavar="FORMAT",
        help=_listed((fmt.name for fmt in FORMATS), last=" or "),
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write ('-': standard output, the default for the text formats)",
    )
    parser.add_argument(
        "--weight",
        choices=WEIGHTS,
        metavar="BY",
        help="folded only: 'samples' (self sample weight) or 'time' (self time in µs); "
        "default: samples when the sequence has them, else time",
    )
    add_all_option(parser)
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def _listed(items: Iterable[str], *, last: str = ", or ") -> str:
    """``a, b, c`` + ``last`` + ``d``: the items as a sentence says them."""
    *first, final = items
    return f"{', '.join(first)}{last}{final}" if first else final


def _export(args: argparse.Namespace) -> int:
    from cmr.cli import progress
    from cmr.exports import BY_NAME, ExportError, export_sequence
    from cmr.views.tree.hops import fold_empty_hops

    fmt = BY_NAME[args.format]
    shown = progress.start("export 1/3: reading the sequence", unit="calls")
    try:
        data = read_sequence(args.db, args.seq)
        calls = len(data.invocations)
        shown.phase(f"export 2/3: converting {calls:,} calls to {fmt.name}", unit="%", total=100)
        if not args.all_calls and not fmt.binary:  # a bundle moves the records as they are
            data = fold_empty_hops(data)
        payload = export_sequence(data, args.format, weight=args.weight, on_step=shown.update)
        if args.output in (None, STDIO):
            shown.close()  # the file goes where the line may be: the line goes first
        shown.phase(f"export 3/3: writing {args.output or STDIO}")
        write_output(args.output, payload, binary=fmt.binary)
    except ExportError as exc:
        raise CliError(str(exc)) from None
    finally:
        shown.close()
    if args.output not in (None, STDIO):
        print(f"cmr: wrote {args.output}: {fmt.open_with}", file=sys.stderr)
    return 0

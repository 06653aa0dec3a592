"""``cmr export``: one sequence in a format other tools open, or as a bundle."""

from __future__ import annotations

import argparse
import sys

from cmr.cli._support import (
    DB_HELP,
    STDIO,
    CliError,
    Commands,
    add_all_option,
    command,
    open_for_reading,
    write_output,
)
from cmr.exports import FORMATS
from cmr.views.render.folded import WEIGHTS


def add_export(commands: Commands) -> None:
    parser = command(
        commands,
        "export",
        description=(
            "Write one sequence in a format other tools open: 'speedscope' (a profile per "
            "thread, and one per sampled thread, for https://www.speedscope.app), 'chrome' (the "
            "Trace Event Format for https://ui.perfetto.dev or chrome://tracing, with an arrow "
            "per hand-off), 'otlp' (OTLP/JSON traces for OpenTelemetry backends: a span per "
            "call, hand-offs as parents, estimated calls flagged), 'otlp-profiles' (the stack "
            "samples as OTLP/JSON profiles, wall and CPU time, each sample linked to the span of "
            "'otlp' it was taken under), 'firefox' (the Firefox Profiler's processed profile for "
            "https://profiler.firefox.com: a thread per traced thread, the calls as markers, the "
            "samples weighted, an idle stretch spread over its duration), 'folded' (stack lines "
            "for flamegraph.pl), or 'bundle' (the raw records, compressed, for 'cmr import' into "
            "another repository). Text formats go to standard output without -o."
        ),
        examples=[
            "cmr export 3f2a9c --format speedscope -o seq.speedscope.json",
            "cmr export 3f2a9c --format chrome -o seq.trace.json",
            "cmr export 3f2a9c --format otlp -o seq.otlp.json",
            "cmr export 3f2a9c --format otlp-profiles -o seq.profiles.json",
            "cmr export 3f2a9c --format firefox -o seq.firefox.json",
            "cmr export 3f2a9c --format folded | flamegraph.pl > seq.svg",
            "cmr export 3f2a9c --format folded --weight time -o seq.folded",
            "cmr export 3f2a9c --format bundle -o seq.ivsq",
        ],
        handler=_export,
    )
    parser.add_argument("seq", metavar="SEQ", help="sequence id, or any unambiguous hex prefix")
    parser.add_argument(
        "--format",
        required=True,
        choices=FORMATS,
        metavar="FORMAT",
        help="speedscope, chrome, otlp, otlp-profiles, firefox, folded or bundle",
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


def _export(args: argparse.Namespace) -> int:
    from cmr.exports import BUNDLE, OPEN_WITH, ExportError, export_sequence
    from cmr.views.hops import fold_empty_hops

    store = open_for_reading(args.db)
    try:
        data = store.load_sequence(store.resolve_sequence(args.seq))
    finally:
        store.close()
    if not args.all_calls and args.format != BUNDLE:  # a bundle moves the records as they are
        data = fold_empty_hops(data)
    try:
        payload = export_sequence(data, args.format, weight=args.weight)
        write_output(args.output, payload, binary=args.format == BUNDLE)
    except ExportError as exc:
        raise CliError(str(exc)) from None
    if args.output not in (None, STDIO):
        print(f"cmr: wrote {args.output}: {OPEN_WITH[args.format]}", file=sys.stderr)
    return 0

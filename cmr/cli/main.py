"""``cmr``: run the repository and look inside it. This module parses and dispatches; each
command is a module of its own beside it (``add_*`` builds its parser, a handler runs it).

Every failure a user can cause (a wrong path, an unknown id, a bad option) ends in one line on
stderr and exit code 1 — argparse usage errors keep their conventional 2 — never a traceback. A
reader that stops early (``cmr show SEQ | head``) ends the command quietly with exit code 0.
The store and server are imported inside the handlers so ``cmr --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys

from cmr.cli._support import DB_HELP, CliError, Handler, Parser, discard_stdout, examples_epilog
from cmr.cli.diff import add_diff
from cmr.cli.export import add_export
from cmr.cli.forward import add_forward
from cmr.cli.import_ import add_import
from cmr.cli.keys import add_keys
from cmr.cli.ls import add_ls
from cmr.cli.profile import add_profile
from cmr.cli.prune import add_prune
from cmr.cli.report import add_report
from cmr.cli.serve import add_serve
from cmr.cli.show import add_show
from cmr.cli.stats import add_stats
from cmr.cli.tail import add_tail
from cmr.cli.top import add_top
from cmr.cli.ui import add_ui
from cmr.defaults import DEFAULT_ENDPOINT
from cmr.store.base import StoreError

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already reported by argparse
        return exc.code if isinstance(exc.code, int) else 1
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except (StoreError, CliError) as exc:
        print(f"cmr: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped early (`cmr ls | head`): its choice, not a failure
        discard_stdout()
        return 0
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="cmr",
        description="The invoseq repository: receive invocation sequences and inspect them.",
        epilog=examples_epilog(
            "cmr serve                      # listen on " + DEFAULT_ENDPOINT,
            "cmr ls                         # the 20 most recent sequences",
            "cmr show 3f2a9c                # the call tree of one sequence",
            "cmr --db /tmp/shop.sqlite stats",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", metavar="PATH", help=DB_HELP)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    add_serve(commands)
    add_ls(commands)
    add_show(commands)
    add_profile(commands)
    add_diff(commands)
    add_top(commands)
    add_tail(commands)
    add_stats(commands)
    add_export(commands)
    add_forward(commands)
    add_report(commands)
    add_import(commands)
    add_prune(commands)
    add_keys(commands)
    add_ui(commands)
    return parser

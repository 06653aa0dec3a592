"""``cmr``: run the repository and look inside it. This module parses and dispatches; each
command is a module of its own beside it (``add_*`` builds its parser, a handler runs it).

Every failure a user can cause (a wrong path, an unknown id, a bad option) ends in one line on
stderr and exit code 1 — argparse usage errors keep their conventional 2 — never a traceback. A
reader that stops early (``cmr show SEQ | head``) ends the command quietly with exit code 0.
Each command's module is imported only when that command runs (``MODULES``), and the store
and server inside the handlers, so ``cmr --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cmr.cli.common import (
    DB_HELP,
    SUMMARIES,
    CliError,
    Formatter,
    Handler,
    Parser,
    discard_stdout,
    examples_epilog,
)
from cmr.defaults import DEFAULT_ENDPOINT

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final

__all__ = ["build_parser", "main"]

#: The module of each command (``cmr.cli.<module>.add_<module>``), imported only when that
#: command runs: ``cmr --help`` lists them from ``SUMMARIES`` and loads no store, view or server.
MODULES: Final = {name: "import_" if name == "import" else name for name in SUMMARIES}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=_command_in(argv) or "")  # "": no command built in full
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
    except BrokenPipeError:  # the reader stopped early (`cmr ls | head`): its choice, not a failure
        discard_stdout()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not _users_error(exc):
            raise
        from cmr.views.render.terms import printable  # a message may quote a sender or server

        print(f"cmr: {printable(str(exc))}", file=sys.stderr)
        return 1


def version_line() -> str:
    """``cmr --version``: invoseq's version and the Python running it."""
    from invoseq import __version__

    name = sys.implementation.name
    python = f"{'CPython' if name == 'cpython' else name} {sys.version.split()[0]}"
    return f"cmr (invoseq) {__version__}, {python}"


def _users_error(exc: Exception) -> bool:
    """A CliError, or a StoreError (which comes from a store, so its module is loaded)."""
    base = sys.modules.get("cmr.store.base")
    return isinstance(exc, CliError) or (base is not None and isinstance(exc, base.StoreError))


def _command_in(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is no option nor ``--db``'s value)."""
    words = iter(argv)
    for word in words:
        if word == "--db":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in MODULES else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """``cmr``'s parser. With ``only``, that command alone is built in full (its module
    imported; none for ``""``), the others are named with their summary: enough for ``cmr
    --help``, and for argparse to refuse a command it does not know."""
    parser = Parser(
        prog="cmr",
        description="The invoseq repository: receive invocation sequences and inspect them.",
        epilog=examples_epilog(
            "cmr serve                      # listen on " + DEFAULT_ENDPOINT,
            "cmr ls                         # the 20 most recent sequences",
            "cmr show 3f2a9c                # the call tree of one sequence",
            "cmr --db /tmp/shop.sqlite stats",
        ),
        formatter_class=Formatter,
    )
    parser.add_argument("--db", metavar="PATH", help=DB_HELP)
    parser.add_argument(
        "--version", action="version", version=version_line(), help="print the version and exit"
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name, module in MODULES.items():
        if only is None or name == only:
            add = getattr(importlib.import_module(f"cmr.cli.{module}"), f"add_{name}")
            add(commands)
        else:
            commands.add_parser(name, help=SUMMARIES[name], formatter_class=Formatter)
    return parser

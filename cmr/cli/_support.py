"""What every ``cmr`` command shares: the one-line-error parser, how commands are registered, output
that survives a closed pipe, and the option parsers."""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NoReturn, TypeAlias

if TYPE_CHECKING:
    from cmr.store.base import Store

Handler = Callable[[argparse.Namespace], int]
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"

DB_HELP = (
    "repository: a SQLite file or a postgresql:// URL "
    "(default: $INVOSEQ_DB, else ./.invoseq/cmr.sqlite)"
)


class CliError(Exception):
    """A user mistake the CLI reports in one line."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line instead of the usage block: the fix is in ``--help``."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def command(
    commands: Commands,
    name: str,
    *,
    summary: str,
    description: str,
    examples: list[str],
    handler: Handler,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples_epilog(*examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def add_read_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/protocol.md)")
    # SUPPRESS: when absent here, the value given before the command (or None) stands.
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def open_for_reading(db: str | None) -> Store:
    """Read commands never create a repository: a wrong path fails with "no repository at …"."""
    from cmr.store import open_store

    return open_store(db, readonly=True)


def emit(text: str) -> None:
    """Write everything and flush here, so a closed pipe surfaces inside main's handler.

    Bytes go to the binary buffer in a loop: a buffered write that the kernel cuts short (the
    reader left) reports fewer bytes instead of failing, and the text layer would drop the rest
    silently. Characters the terminal's encoding lacks (box guides in a latin-1 locale) are
    replaced rather than raised."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text-only stand-in for stdout
        stream.write(text + "\n")
        stream.flush()
        return
    stream.flush()
    data = memoryview((text + "\n").encode(stream.encoding or "utf-8", errors="replace"))
    while data:
        data = data[buffer.write(data) :]
    buffer.flush()


def emit_chunks(chunks: Iterable[bytes]) -> None:
    """Write a big document piece by piece (a 1,000,000-call tree is hundreds of MB of JSON,
    never held whole), then a newline, as ``emit`` would."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    stream.flush()
    for chunk in itertools.chain(chunks, [b"\n"]):
        if buffer is None:  # a text-only stand-in for stdout
            stream.write(chunk.decode())
            continue
        data = memoryview(chunk)
        while data:
            data = data[buffer.write(data) :]
    (stream if buffer is None else buffer).flush()


def discard_stdout() -> None:
    """The reader went away (``cmr ls | head``): point stdout at devnull so the interpreter's
    final flush does not raise again on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # not a real file descriptor (captured output): nothing will flush to the pipe


def colour_wanted() -> bool:
    """Colour for a terminal, unless NO_COLOR (https://no-color.org) is set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def milliseconds(text: str) -> int:
    """Milliseconds on the command line, nanoseconds inside."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got '{text}'") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more milliseconds, got '{text}'")
    return round(value * 1_000_000)


def examples_epilog(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)

"""What every ``cmr`` command shares: the one-line-error parser, how commands are registered, output
that survives a closed pipe, and the option parsers."""

from __future__ import annotations

import argparse
import itertools
import os
import sys

from cmr.ages import AGE_GRAMMAR, age_ns, milliseconds_ns, moment_ns
from cmr.defaults import DB_ENV, DEFAULT_DB_PATH

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Final, NoReturn, TypeAlias

    from cmr.store.base import Store
    from cmr.store.records import SequenceData

Handler: TypeAlias = "Callable[[argparse.Namespace], int]"
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"

DB_HELP = (
    f"repository: a SQLite file or a postgresql:// URL (default: ${DB_ENV}, else {DEFAULT_DB_PATH})"
)


class CliError(Exception):
    """A user mistake the CLI reports in one line."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line instead of the usage block: the fix is in ``--help``."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


#: Every command's one line in ``cmr --help``, in its order: main.py lists the commands from it
#: without importing their modules.
SUMMARIES: Final = {
    "serve": "run the repository server",
    "ls": "list recent sequences, or those a query selects",
    "show": "print one sequence's call tree",
    "profile": "print a merged stack tree: one sequence, or one method's calls",
    "diff": "compare two sequences call path by call path",
    "top": "sum up many sequences: one row per root, or per method",
    "map": "the services and the hand-offs between them, over many sequences",
    "tail": "print each sequence as it completes",
    "stats": "show ingest counters and known processes",
    "export": "write one sequence to a file other tools open",
    "forward": "push sequences to an OpenTelemetry (OTLP/HTTP) receiver",
    "report": "write one sequence as a self-contained HTML page",
    "import": "load a sequence bundle into the repository",
    "prune": "remove old sequences and samples (retention)",
    "keys": "make CURVE key pairs: who may send to the repository",
    "ui": "browse sequences in a web browser (local only)",
}


def command(
    commands: Commands,
    name: str,
    *,
    summary: str | None = None,
    description: str,
    examples: list[str],
    handler: Handler,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        name,
        help=SUMMARIES[name] if summary is None else summary,
        description=description,
        epilog=examples_epilog(*examples),
        formatter_class=Formatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` reads it (``COLUMNS``, then the
    terminal of stdout, then 80), without loading ``shutil`` and the compression modules it
    imports: argparse's help formatter loads it for every parser it makes otherwise."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's ``RawDescriptionHelpFormatter`` (descriptions and epilogs kept as written), as
    wide as the terminal (``terminal_columns``), as argparse's own would be."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = terminal_columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


def add_read_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/protocol.md)")
    # SUPPRESS: when absent here, the value given before the command (or None) stands.
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def add_all_option(parser: argparse.ArgumentParser) -> None:
    """``--all``: keep the hand-offs to untraced code that ran nothing traced (``views.tree.hops``
    folds them into their caller's line by default)."""
    parser.add_argument(
        "--all",
        action="store_true",
        dest="all_calls",
        help="keep every call: hand-offs to untraced code that ran nothing traced (the thread "
        "asyncio.run starts for its shutdown, a to_thread(sum, ...)) are otherwise folded into "
        "the line of the call that handed them off",
    )


def open_for_reading(db: str | None) -> Store:
    """Read commands never create a repository: a wrong path fails with "no repository at …"."""
    from cmr.store import open_store

    return open_store(db, readonly=True)


def read_sequence(db: str | None, seq: str) -> SequenceData:
    """The sequence ``seq`` names (an id or an unambiguous prefix), read whole from ``db``."""
    store = open_for_reading(db)
    try:
        return store.load_sequence(store.resolve_sequence(seq))
    finally:
        store.close()


#: ``-o -`` or ``FILE -``: standard output, or standard input.
STDIO: Final = "-"


def write_stdout(chunks: Iterable[bytes]) -> None:
    """The one writer to standard output: every byte, in a loop, flushed at the end, so a closed
    pipe surfaces inside main's handler (BrokenPipeError) and a write the kernel cuts short (the
    reader left) is never dropped silently, as the text layer would."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    stream.flush()
    for chunk in chunks:
        if buffer is None:  # a text-only stand-in for stdout (tests capturing output)
            stream.write(chunk.decode(errors="replace"))
            continue
        data = memoryview(chunk)
        while data:
            data = data[buffer.write(data) :]
    (stream if buffer is None else buffer).flush()


def emit(text: str) -> None:
    """A line of text. Characters the terminal's encoding lacks (box guides in a latin-1 locale)
    are replaced rather than raised."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    write_stdout([(text + "\n").encode(encoding, errors="replace")])


def emit_chunks(chunks: Iterable[bytes]) -> None:
    """A big document piece by piece (a 1,000,000-call tree is hundreds of MB of JSON, never
    held whole), then a newline."""
    write_stdout(itertools.chain(chunks, [b"\n"]))


def write_output(target: str | None, payload: bytes, *, binary: bool) -> None:
    """Write to the file ``target``, or to standard output for None or ``-``. A binary file goes
    to standard output only when asked (``-o -``) and never to a terminal."""
    if target is None or target == STDIO:
        if binary and (target is None or sys.stdout.isatty()):
            raise CliError("a bundle is binary: give -o FILE (or -o - to pipe it)")
        write_stdout([payload])
        return
    try:
        with open(target, "wb") as file:
            file.write(payload)
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from None


def read_input(source: str) -> bytes:
    """The bytes of the file ``source``, or of standard input for ``-``."""
    if source == STDIO:
        return sys.stdin.buffer.read()
    try:
        with open(source, "rb") as file:
            return file.read()
    except OSError as exc:
        raise CliError(f"cannot read {source}: {exc.strerror or exc}") from None


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


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {value}")
    return value


def non_negative_int(text: str) -> int:
    return _whole_number(text, 0)


def positive_int(text: str) -> int:
    return _whole_number(text, 1)


def milliseconds(text: str) -> int:
    """Milliseconds on the command line, or a number and its unit (``250us``, ``1.5s``, ``2m``);
    nanoseconds inside."""
    try:
        return milliseconds_ns(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got '{text}'") from None


def examples_epilog(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


#: Seconds per unit of an age (``--since 30m``, ``--older-than 7d``): one grammar for every
#: command that takes one.
def parse_age(text: str) -> int:
    """An age (``7d``), as nanoseconds: the argparse type of ``--older-than``."""
    ns = age_ns(text)
    if ns is None:
        raise argparse.ArgumentTypeError(f"expected an age: {AGE_GRAMMAR}; got '{text}'")
    return ns


def parse_since(text: str, now_ns: int | None = None) -> int:
    """``--since``: an age (``30m`` ago) or an ISO time, as wall-clock nanoseconds."""
    try:
        return moment_ns(text, now_ns)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None

"""``cmr``: run the repository and look inside it.

Every failure a user can cause (a wrong path, an unknown id, a bad option) ends in one line on
stderr and exit code 1 — argparse usage errors keep their conventional 2 — never a traceback. A
reader that stops early (``cmr show SEQ | head``) ends the command quietly with exit code 0.
The store and server are imported inside the handlers so ``cmr --help`` stays instant and the CLI
never drags the server into ``tracer run``, which calls ``render_sequence`` from here.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, TypeAlias

from cmr.defaults import DEFAULT_ENDPOINT
from cmr.store import LOST_GRACE_MS, MISSED_HEARTBEATS
from cmr.store.base import SequenceSummary, StoreError
from cmr.views.calltree import SequenceTree, build_tree
from cmr.views.processors import drop_shorter_than, limit_depth, thread_activity
from cmr.views.render import json as json_render
from cmr.views.render import tables
from cmr.views.render.text import render_text

if TYPE_CHECKING:
    from cmr.store.base import Store

Handler = Callable[[argparse.Namespace], int]
Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"

_DB_HELP = "repository file (default: $INVOSEQ_DB, else ./.invoseq/cmr.sqlite)"


class CliError(Exception):
    """A user mistake the CLI reports in one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line instead of the usage block: the fix is in ``--help``."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def render_sequence(
    store: Store,
    seq: bytes,
    *,
    depth: int | None = None,
    min_duration_ns: int = 0,
    color: bool = False,
) -> str:
    """One sequence's tree as ``cmr show`` prints it (without a trailing newline)."""
    return render_text(view_sequence(store, seq, depth, min_duration_ns), color=color)


def render_sequence_list(summaries: list[SequenceSummary]) -> str:
    """Sequence summaries as the table ``cmr ls`` prints (without a trailing newline)."""
    return tables.render_sequence_list(summaries)


def view_sequence(
    store: Store, seq: bytes, depth: int | None, min_duration_ns: int
) -> SequenceTree:
    tree = build_tree(store.load_sequence(seq))
    if depth is not None:
        tree = limit_depth(tree, depth)
    return drop_shorter_than(tree, min_duration_ns)


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
        _discard_stdout()
        return 0
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cmr",
        description="The invoseq repository: receive invocation sequences and inspect them.",
        epilog=_examples(
            "cmr serve                      # listen on " + DEFAULT_ENDPOINT,
            "cmr ls                         # the 20 most recent sequences",
            "cmr show 3f2a9c                # the call tree of one sequence",
            "cmr --db /tmp/shop.sqlite stats",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", metavar="PATH", help=_DB_HELP)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_serve(commands)
    _add_ls(commands)
    _add_show(commands)
    _add_stats(commands)
    return parser


def _command(
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
        epilog=_examples(*examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def _add_serve(commands: Commands) -> None:
    parser = _command(
        commands,
        "serve",
        summary="run the repository server",
        description=(
            "Receive batches from traced processes and store them until interrupted (Ctrl-C). "
            "Only listen on addresses you trust: the server has no authentication."
        ),
        examples=[
            "cmr serve",
            "cmr serve --bind tcp://127.0.0.1:7400 --db /var/lib/invoseq/cmr.sqlite",
            "cmr serve --bind ipc:///tmp/invoseq.sock --memory   # nothing kept on disk",
        ],
        handler=_serve,
    )
    parser.add_argument(
        "--bind",
        metavar="ENDPOINT",
        default=DEFAULT_ENDPOINT,
        help=f"ZeroMQ endpoint to listen on (default: {DEFAULT_ENDPOINT})",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=_DB_HELP)
    where.add_argument("--memory", action="store_true", help="keep everything in memory only")


def _add_ls(commands: Commands) -> None:
    parser = _command(
        commands,
        "ls",
        summary="list recent sequences",
        description=(
            "List the most recent sequences, newest first, with their duration, status and size. "
            "The SEQ column is a prefix of the id that 'cmr show' accepts."
        ),
        examples=["cmr ls", "cmr ls --limit 100", "cmr ls --json | jq '.[0].seq'"],
        handler=_ls,
    )
    parser.add_argument(
        "--limit",
        type=_non_negative_int,
        default=20,
        metavar="N",
        help="how many sequences (default: 20)",
    )
    _add_read_options(parser)


def _add_show(commands: Commands) -> None:
    parser = _command(
        commands,
        "show",
        summary="print one sequence's call tree",
        description=(
            "Print the call tree of one sequence, across its threads and processes. A sequence "
            "that is still running is shown as far as it got; calls that have not ended are "
            "marked 'running', or 'incomplete' when their process ended or was lost (went "
            "silent past its heartbeat) without finishing them. A call handed off to another "
            "thread, task or process is marked with that hop and how long the work was queued "
            "before it started. A sequence started by a foreign system hangs under "
            "'<remote parent>'."
        ),
        examples=[
            "cmr show 3f2a9c",
            "cmr show 3f2a9c --depth 3 --min-duration 0.5",
            "cmr show 3f2a9c --threads",
            "cmr show 3f2a9c --json > tree.json",
        ],
        handler=_show,
    )
    parser.add_argument("seq", metavar="SEQ", help="sequence id, or any unambiguous hex prefix")
    parser.add_argument(
        "--depth",
        type=_non_negative_int,
        metavar="N",
        help="show N levels below the root (0: the root alone)",
    )
    parser.add_argument(
        "--min-duration",
        type=_milliseconds,
        default=0,
        metavar="MS",
        dest="min_duration_ns",
        help="hide calls shorter than MS milliseconds (fractions allowed)",
    )
    parser.add_argument(
        "--threads",
        action="store_true",
        help="list the threads the sequence ran on instead of the tree: calls and busy time",
    )
    _add_read_options(parser)


def _add_stats(commands: Commands) -> None:
    parser = _command(
        commands,
        "stats",
        summary="show ingest counters and known processes",
        description=(
            "Show what the repository received: batches, duplicates (resent after a lost "
            "acknowledgement), events, frames rejected by reason, and per process the events it "
            "reported dropped, its heartbeat interval, when it was last heard from and its "
            "state: alive, ended (shut down cleanly) or lost (silent for longer than "
            f"{MISSED_HEARTBEATS} heartbeats plus {LOST_GRACE_MS} ms)."
        ),
        examples=["cmr stats", "cmr stats --json"],
        handler=_stats,
    )
    _add_read_options(parser)


def _add_read_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (see docs/protocol.md)")
    # SUPPRESS: when absent here, the value given before the command (or None) stands.
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=_DB_HELP)


def _serve(args: argparse.Namespace) -> int:
    from cmr.server import run_server
    from cmr.store import open_store

    if args.memory and args.db is not None:
        raise CliError("--memory keeps nothing on disk: leave out --db")
    logging.basicConfig(format="cmr: %(message)s")
    return run_server(open_store(args.db, memory=args.memory), args.bind)  # it closes the store


def _ls(args: argparse.Namespace) -> int:
    store = _open_for_reading(args.db)
    try:
        summaries = store.list_sequences(args.limit)
    finally:
        store.close()
    if args.json:
        _emit(json_render.summaries_to_json(summaries))
    else:
        _emit(tables.render_sequence_list(summaries))
    return 0


def _show(args: argparse.Namespace) -> int:
    if args.threads and (args.depth is not None or args.min_duration_ns):
        raise CliError("--threads counts every call: leave out --depth and --min-duration")
    store = _open_for_reading(args.db)
    try:
        seq = store.resolve_sequence(args.seq)
        tree = view_sequence(store, seq, args.depth, args.min_duration_ns)
    finally:
        store.close()
    if args.threads:
        activity = thread_activity(tree)
        if args.json:
            _emit(json_render.thread_activity_to_json(activity))
        else:
            _emit(tables.render_thread_activity(tree, activity))
        return 0
    if args.json:
        _emit(json_render.tree_to_json(tree))
    else:
        _emit(render_text(tree, color=_colour_wanted()))
    return 0


def _stats(args: argparse.Namespace) -> int:
    store = _open_for_reading(args.db)
    try:
        stats = store.stats()
    finally:
        store.close()
    _emit(json_render.stats_to_json(stats) if args.json else tables.render_stats(stats))
    return 0


def _open_for_reading(db: str | None) -> Store:
    """Read commands never create a repository: a wrong path fails with "no repository at …"."""
    from cmr.store import open_store

    return open_store(db, readonly=True)


def _emit(text: str) -> None:
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


def _discard_stdout() -> None:
    """The reader went away (``cmr ls | head``): point stdout at devnull so the interpreter's
    final flush does not raise again on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # not a real file descriptor (captured output): nothing will flush to the pipe


def _colour_wanted() -> bool:
    """Colour for a terminal, unless NO_COLOR (https://no-color.org) is set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _milliseconds(text: str) -> int:
    """Milliseconds on the command line, nanoseconds inside."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got '{text}'") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more milliseconds, got '{text}'")
    return round(value * 1_000_000)


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)

"""``cmr``: run the repository and look inside it.

Every failure a user can cause (a wrong path, an unknown id, a bad option) ends in one line on
stderr and exit code 1 — argparse usage errors keep their conventional 2 — never a traceback. A
reader that stops early (``cmr show SEQ | head``) ends the command quietly with exit code 0.
The store and server are imported inside the handlers so ``cmr --help`` stays instant and the CLI
never drags the server into ``tracer run``, which calls ``render_sequence`` from here.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cmr.cli_keys import add_curve_options, add_keys, curve_from_args
from cmr.cli_support import (
    DB_HELP,
    CliError,
    Commands,
    Handler,
    Parser,
    add_read_options,
    colour_wanted,
    command,
    discard_stdout,
    emit,
    examples_epilog,
    milliseconds,
    non_negative_int,
    open_for_reading,
)
from cmr.defaults import DEFAULT_ENDPOINT
from cmr.exports import FORMATS
from cmr.store import LOST_GRACE_MS, MISSED_HEARTBEATS
from cmr.store.base import SequenceSummary, StoreError
from cmr.views._gc import paused_gc
from cmr.views.budget import DEFAULT_MAX_NODES
from cmr.views.calltree import SequenceTree, build_tree
from cmr.views.merge import merge_samples
from cmr.views.processors import drop_shorter_than, limit_depth, thread_activity
from cmr.views.render import json as json_render
from cmr.views.render import tables
from cmr.views.render.folded import WEIGHTS
from cmr.views.render.text import render_text

if TYPE_CHECKING:
    from cmr.store.base import Store


def render_sequence(
    store: Store,
    seq: bytes,
    *,
    depth: int | None = None,
    min_duration_ns: int = 0,
    color: bool = False,
    samples: bool = False,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> str:
    """One sequence's tree as ``cmr show`` prints it (without a trailing newline); ``samples``
    merges the stack samples in, as ``cmr show --samples`` does; ``max_nodes`` bounds its lines
    as ``--max-nodes`` does (0: no limit)."""
    tree = view_sequence(store, seq, depth, min_duration_ns, samples=samples)
    return render_text(tree, color=color, max_nodes=max_nodes)


def render_sequence_list(summaries: list[SequenceSummary]) -> str:
    """Sequence summaries as the table ``cmr ls`` prints (without a trailing newline)."""
    return tables.render_sequence_list(summaries)


def view_sequence(
    store: Store, seq: bytes, depth: int | None, min_duration_ns: int, *, samples: bool = False
) -> SequenceTree:
    """The tree ``cmr show`` prints. Samples are read and merged only when asked for, so a plain
    ``cmr show`` never pays for them. The garbage collector waits meanwhile: a big sequence is
    millions of objects that all stay alive, which it would scan over and over."""
    with paused_gc():
        data = store.load_sequence(seq, samples=samples)
        tree = build_tree(data)
        if samples:
            tree = merge_samples(tree, data)
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
    _add_serve(commands)
    _add_ls(commands)
    _add_show(commands)
    _add_profile(commands)
    _add_stats(commands)
    _add_export(commands)
    _add_forward(commands)
    _add_report(commands)
    _add_import(commands)
    _add_prune(commands)
    add_keys(commands)
    _add_ui(commands)
    return parser


def _add_serve(commands: Commands) -> None:
    parser = command(
        commands,
        "serve",
        summary="run the repository server",
        description=(
            "Receive batches from traced processes and store them until interrupted (Ctrl-C). "
            "Without CURVE, anyone who reaches the address can send: only listen on addresses "
            "you trust. With --curve-secret and --allowed-clients, connections are encrypted "
            "and only clients whose public key is allowed get through (see 'cmr keys')."
        ),
        examples=[
            "cmr serve",
            "cmr serve --bind tcp://127.0.0.1:7400 --db /var/lib/invoseq/cmr.sqlite",
            "cmr serve --bind ipc:///tmp/invoseq.sock --memory   # nothing kept on disk",
            "cmr serve --curve-secret keys/repository.key_secret --allowed-clients keys/clients",
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
    where.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)
    where.add_argument("--memory", action="store_true", help="keep everything in memory only")
    add_curve_options(parser)


def _add_ls(commands: Commands) -> None:
    parser = command(
        commands,
        "ls",
        summary="list recent sequences",
        description=(
            "List the most recent sequences, newest first, with their duration, status and size. "
            "A status ending in ', lossy' means a traced process had to drop some events of the "
            "sequence. The SEQ column is a prefix of the id that 'cmr show' accepts."
        ),
        examples=["cmr ls", "cmr ls --limit 100", "cmr ls --json | jq '.[0].seq'"],
        handler=_ls,
    )
    parser.add_argument(
        "--limit",
        type=non_negative_int,
        default=20,
        metavar="N",
        help="how many sequences (default: 20)",
    )
    add_read_options(parser)


def _add_show(commands: Commands) -> None:
    parser = command(
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
            "'<remote parent>'. With --samples, the frames the stack sampler saw below each "
            "call are merged in, estimated from the samples and marked '~'. A sequence some of "
            "whose events a process had to drop is marked lossy under the header, naming it. "
            "A big tree is cut to --max-nodes lines: the longest calls first, the rest of each "
            "caller's calls folded into one line ('… 9,990 more calls, total 12.3 s'), names "
            "that repeat among them counted, and a last line saying how "
            "many calls are hidden."
        ),
        examples=[
            "cmr show 3f2a9c",
            "cmr show 3f2a9c --depth 3 --min-duration 0.5",
            "cmr show 3f2a9c --samples",
            "cmr show 3f2a9c --threads",
            "cmr show 3f2a9c --max-nodes 0 | less   # every call, however many",
            "cmr show 3f2a9c --json > tree.json",
        ],
        handler=_show,
    )
    parser.add_argument("seq", metavar="SEQ", help="sequence id, or any unambiguous hex prefix")
    parser.add_argument(
        "--depth",
        type=non_negative_int,
        metavar="N",
        help="show N levels below the root (0: the root alone)",
    )
    parser.add_argument(
        "--min-duration",
        type=milliseconds,
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
    parser.add_argument(
        "--samples",
        action="store_true",
        help="merge in the stack samples: what ran below each call, estimated ('~')",
    )
    parser.add_argument(
        "--max-nodes",
        type=non_negative_int,
        default=DEFAULT_MAX_NODES,
        metavar="N",
        help=f"print at most N lines of tree, longest calls first, folding the rest of each "
        f"caller's calls into one line (default: {DEFAULT_MAX_NODES}; 0: no limit; --json "
        "always writes every call)",
    )
    add_read_options(parser)


def _add_profile(commands: Commands) -> None:
    from cmr.cli_profile import add_profile  # it uses this module's helpers: import it late

    add_profile(commands)


def _add_forward(commands: Commands) -> None:
    from cmr.cli_forward import add_forward  # it uses this module's helpers: import it late

    add_forward(commands)


def _add_ui(commands: Commands) -> None:
    from cmr.cli_ui import add_ui  # its own module, so this one stays small

    add_ui(commands)


def _add_stats(commands: Commands) -> None:
    parser = command(
        commands,
        "stats",
        summary="show ingest counters and known processes",
        description=(
            "Show what the repository received: batches, duplicates (resent after a lost "
            "acknowledgement), events, stack samples, frames rejected by reason, and per process "
            "the events it reported dropped, its heartbeat interval, when it was last heard from "
            "and its state: alive, ended (shut down cleanly) or lost (silent for longer than "
            f"{MISSED_HEARTBEATS} heartbeats plus {LOST_GRACE_MS} ms); then, for the processes "
            "that ran the stack sampler, its mode and interval, ticks, late ticks and its cost."
        ),
        examples=["cmr stats", "cmr stats --json"],
        handler=_stats,
    )
    add_read_options(parser)


def _add_export(commands: Commands) -> None:
    parser = command(
        commands,
        "export",
        summary="write one sequence to a file other tools open",
        description=(
            "Write one sequence in a format other tools open: 'speedscope' (a profile per "
            "thread, and one per sampled thread, for https://www.speedscope.app), 'chrome' (the "
            "Trace Event Format for https://ui.perfetto.dev or chrome://tracing, with an arrow "
            "per hand-off), 'otlp' (OTLP/JSON traces for OpenTelemetry backends: a span per "
            "call, hand-offs as parents, estimated calls flagged), 'folded' (stack lines for "
            "flamegraph.pl), or 'bundle' (the raw records, compressed, for 'cmr import' into "
            "another repository). Text formats go to standard output without -o."
        ),
        examples=[
            "cmr export 3f2a9c --format speedscope -o seq.speedscope.json",
            "cmr export 3f2a9c --format chrome -o seq.trace.json",
            "cmr export 3f2a9c --format otlp -o seq.otlp.json",
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
        help="speedscope, chrome, otlp, folded or bundle",
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
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def _add_report(commands: Commands) -> None:
    from cmr.cli_report import add_report  # it uses this module's helpers: import it late

    add_report(commands)


def _add_prune(commands: Commands) -> None:
    from cmr.cli_prune import add_prune  # it uses this module's helpers: import it late

    add_prune(commands)


def _add_import(commands: Commands) -> None:
    parser = command(
        commands,
        "import",
        summary="load a sequence bundle into the repository",
        description=(
            "Load a bundle written by 'cmr export --format bundle' into the repository "
            "(created if missing), through the same checks as batches from the network. "
            "Importing a bundle again stores nothing new."
        ),
        examples=[
            "cmr import seq.ivsq",
            "cmr import seq.ivsq --db /tmp/copy.sqlite",
            "ssh prod cmr export 3f2a9c --format bundle -o - | cmr import -",
        ],
        handler=_import,
    )
    parser.add_argument("file", metavar="FILE", help="the bundle ('-': standard input)")
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def _serve(args: argparse.Namespace) -> int:
    from cmr.server import run_server
    from cmr.store import open_store

    if args.memory and args.db is not None:
        raise CliError("--memory keeps nothing on disk: leave out --db")
    curve = curve_from_args(args)  # before the repository is opened: a bad key creates nothing
    logging.basicConfig(format="cmr: %(message)s")
    store = open_store(args.db, memory=args.memory)
    return run_server(store, args.bind, curve=curve)  # it closes the store


def _ls(args: argparse.Namespace) -> int:
    store = open_for_reading(args.db)
    try:
        summaries = store.list_sequences(args.limit)
    finally:
        store.close()
    if args.json:
        emit(json_render.summaries_to_json(summaries))
    else:
        emit(tables.render_sequence_list(summaries))
    return 0


def _show(args: argparse.Namespace) -> int:
    if args.threads and (args.depth is not None or args.min_duration_ns):
        raise CliError("--threads counts every call: leave out --depth and --min-duration")
    if args.threads and args.samples:
        raise CliError("--threads counts calls, not samples: leave out --samples")
    store = open_for_reading(args.db)
    try:
        seq = store.resolve_sequence(args.seq)
        tree = view_sequence(store, seq, args.depth, args.min_duration_ns, samples=args.samples)
    finally:
        store.close()
    if args.threads:
        activity = thread_activity(tree)
        if args.json:
            emit(json_render.thread_activity_to_json(activity))
        else:
            emit(tables.render_thread_activity(tree, activity))
        return 0
    if args.json:
        _emit_chunks(json_render.iter_tree_json(tree))
    else:
        emit(render_text(tree, color=colour_wanted(), max_nodes=args.max_nodes))
    return 0


def _emit_chunks(chunks: Iterable[bytes]) -> None:
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


def _stats(args: argparse.Namespace) -> int:
    store = open_for_reading(args.db)
    try:
        stats = store.stats()
    finally:
        store.close()
    emit(json_render.stats_to_json(stats) if args.json else tables.render_stats(stats))
    return 0


def _export(args: argparse.Namespace) -> int:
    from cmr.exports import BUNDLE, OPEN_WITH, STDIO, ExportError, export_sequence, write_output

    store = open_for_reading(args.db)
    try:
        data = store.load_sequence(store.resolve_sequence(args.seq))
    finally:
        store.close()
    try:
        payload = export_sequence(data, args.format, weight=args.weight)
        write_output(args.output, payload, binary=args.format == BUNDLE)
    except ExportError as exc:
        raise CliError(str(exc)) from None
    if args.output not in (None, STDIO):
        print(f"cmr: wrote {args.output}: {OPEN_WITH[args.format]}", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    from cmr.bundle import import_bundle
    from cmr.exports import ExportError, describe_import, load_bundle, read_input
    from cmr.store import open_store

    try:
        bundle = load_bundle(args.file, read_input(args.file))
    except ExportError as exc:
        raise CliError(str(exc)) from None
    store = open_store(args.db)
    try:
        result = import_bundle(store, bundle)
    finally:
        store.close()
    emit(describe_import(result))
    return 0

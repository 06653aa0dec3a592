"""``cmr show``: one sequence's call tree, its threads, or its JSON."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from cmr.cli.common import (
    CliError,
    Commands,
    add_all_option,
    add_read_options,
    colour_wanted,
    command,
    emit,
    emit_chunks,
    milliseconds,
    non_negative_int,
    open_for_reading,
)
from cmr.views.pipeline import render_sequence, view_sequence
from cmr.views.tree.budget import DEFAULT_MAX_NODES

if TYPE_CHECKING:
    from cmr.views.model import SequenceTree


def add_show(commands: Commands) -> None:
    parser = command(
        commands,
        "show",
        description=(
            "Print the call tree of one sequence, across its threads and processes. A sequence "
            "that is still running is shown as far as it got; calls that have not ended are "
            "marked 'running', or 'incomplete' when their process ended or was lost (went "
            "silent past its heartbeat) without finishing them. A call handed off to another "
            "thread, task or process is marked with that hop and how long the work was queued "
            "before it started; one that outlived its caller (work the caller did not wait "
            "for) is marked 'detached': the sequence's status is its root call's. A sequence "
            "started by a foreign system hangs under "
            "'<remote parent>'. With --samples, the frames the stack sampler saw below each "
            "call are merged in, estimated from the samples and marked '~'. A sequence some of "
            "whose events a process had to drop is marked lossy under the header, naming it. "
            "With --critical-path, only the chain of calls that set the sequence's end-to-end "
            "time: from the root, each time the callee its caller waited for last (a hand-off's "
            "queue wait included). "
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
            "cmr show 3f2a9c --critical-path   # the calls that set its end-to-end time",
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
        "--critical-path",
        action="store_true",
        help="show only the critical path: from the root, each time the callee its caller "
        "waited for last (the calls that set the end-to-end time, queue waits included)",
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
    add_all_option(parser)
    add_read_options(parser)


def _show(args: argparse.Namespace) -> int:
    _check_options(args)
    store = open_for_reading(args.db)
    try:
        seq = store.resolve_sequence(args.seq)
        if not (args.threads or args.json or args.critical_path):
            emit(
                render_sequence(
                    store,
                    seq,
                    depth=args.depth,
                    min_duration_ns=args.min_duration_ns,
                    color=colour_wanted(),
                    samples=args.samples,
                    max_nodes=args.max_nodes,
                    all_calls=args.all_calls,
                )
            )
            return 0
        tree = view_sequence(
            store,
            seq,
            args.depth,
            args.min_duration_ns,
            samples=args.samples,
            all_calls=args.all_calls,
        )
    finally:
        store.close()
    _show_tree(args, tree)
    return 0


def _show_tree(args: argparse.Namespace, tree: SequenceTree) -> None:
    """What ``--critical-path``, ``--threads`` and ``--json`` print (their modules loaded only
    for them: the default text needs none)."""
    from cmr.views.analyses.critical import critical_path, describe_path, path_tree
    from cmr.views.render import json as json_render
    from cmr.views.render import tables
    from cmr.views.render.text import render_text
    from cmr.views.tree.processors import thread_activity

    if args.critical_path:
        path = critical_path(tree.root)
        if args.json:
            emit(json_render.critical_path_to_json(tree, path))
        else:
            emit(
                describe_path(path)
                + "\n"
                + render_text(path_tree(tree, path), color=colour_wanted())
            )
    elif args.threads:
        activity = thread_activity(tree)
        if args.json:
            emit(json_render.thread_activity_to_json(activity))
        else:
            emit(tables.render_thread_activity(tree, activity))
    else:
        emit_chunks(json_render.iter_tree_json(tree))


def _check_options(args: argparse.Namespace) -> None:
    if args.threads and (args.depth is not None or args.min_duration_ns):
        raise CliError("--threads counts every call: leave out --depth and --min-duration")
    if args.threads and args.samples:
        raise CliError("--threads counts calls, not samples: leave out --samples")
    if args.critical_path and (args.threads or args.depth is not None or args.min_duration_ns):
        raise CliError(
            "--critical-path follows every call: leave out --threads, --depth and --min-duration"
        )

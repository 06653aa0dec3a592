"""``cmr profile``: one sequence, or one method across many sequences, as a merged stack tree.

``--method NAME`` profiles the sequences that hold a call of NAME, each from that call down (a
call of NAME nested in another is part of the outer one), so the profile answers "where does NAME
spend its time", whoever called it. The sequences are the most recent ones (``--limit``, default
DEFAULT_LIMIT) that started at or after ``--since``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from cmr.cli.common import (
    CliError,
    Commands,
    add_all_option,
    add_read_options,
    colour_wanted,
    command,
    emit,
    non_negative_int,
    open_for_reading,
    parse_since,
)
from cmr.gc_paused import paused_gc
from cmr.views.analyses.bigprofile import sequence_profile
from cmr.views.analyses.profile import Profile, build_profile, method_subtrees, profile_sequence
from cmr.views.model import Node
from cmr.views.render.json import profile_to_json
from cmr.views.render.profile_text import render_profile
from cmr.views.render.tables import format_local_time
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.budget import DEFAULT_MAX_NODES
from cmr.views.tree.calltree import build_tree
from cmr.views.tree.hops import fold_empty_hops

if TYPE_CHECKING:
    from cmr.store.base import Store

#: How many sequences ``--method`` profiles when no ``--limit`` is given: the most recent ones.
DEFAULT_LIMIT: Final = 100


def add_profile(commands: Commands) -> None:
    parser = command(
        commands,
        "profile",
        description=(
            "Print a profile the way pyinstrument does: calls and the frames estimated from "
            "stack samples below them, merged where the same function sits at the same place "
            "(repeated calls become one line), longest first, with total and self time, on-CPU "
            "and off-CPU time as the samples measured it, and sample counts. Give a sequence, "
            "or --method NAME to profile every call of NAME (module.qualname as 'cmr show' "
            "prints it, or the bare qualname) in the most recent sequences that hold one, each "
            "from that call down. A big profile is cut to --max-nodes lines, the longest "
            "first, the rest of each caller's lines folded into one ('… 12 more, total "
            "3.20 ms'), and a last line saying how many are hidden."
        ),
        examples=[
            "cmr profile 3f2a9c",
            "cmr profile 3f2a9c --by-thread",
            "cmr profile --method shop.checkout --since 1h",
            "cmr profile --method checkout --since 2026-05-01T09:00 --limit 20 --lines",
            "cmr profile --method shop.checkout --json > checkout.json",
            "cmr profile 3f2a9c --max-nodes 0 | less   # every line, however many",
        ],
        handler=_profile,
    )
    parser.add_argument(
        "seq", nargs="?", metavar="SEQ", help="sequence id, or any unambiguous hex prefix"
    )
    parser.add_argument("--method", metavar="NAME", help="profile every call of this method")
    parser.add_argument(
        "--since",
        type=parse_since,
        dest="since_ns",
        metavar="WHEN",
        help="with --method: sequences started since WHEN: a duration ago (30s, 15m, 1h, 2d, "
        "1w) or an ISO time (local time unless it names its zone)",
    )
    parser.add_argument(
        "--limit",
        type=non_negative_int,
        metavar="N",
        help=f"with --method: the N most recent sequences (default: {DEFAULT_LIMIT})",
    )
    parser.add_argument(
        "--by-thread",
        action="store_true",
        help="one tree per thread (host:pid, name and tid), each what ran on that thread",
    )
    parser.add_argument(
        "--lines",
        action="store_true",
        help="tell a sampled function's lines apart (by the line each frame was executing)",
    )
    parser.add_argument(
        "--max-nodes",
        type=non_negative_int,
        default=DEFAULT_MAX_NODES,
        metavar="N",
        help=f"print at most N lines of profile, longest first, folding the rest of each "
        f"caller's lines into one (default: {DEFAULT_MAX_NODES}; 0: no limit; --json always "
        "writes every line)",
    )
    add_all_option(parser)
    add_read_options(parser)


def _profile(args: argparse.Namespace) -> int:
    if (args.seq is None) == (args.method is None):
        raise CliError("give a sequence id or --method NAME (one of them)")
    if args.seq is not None and (args.since_ns is not None or args.limit is not None):
        raise CliError("--since and --limit choose sequences for --method: leave them out")
    store = open_for_reading(args.db)
    try:
        if args.seq is not None:
            seq = store.resolve_sequence(args.seq)
            profile = _sequence_profile(store, seq, args)
        else:
            seq = None
            limit = DEFAULT_LIMIT if args.limit is None else args.limit
            profile = _method_profile(store, args.method, args.since_ns, limit, args)
    finally:
        store.close()
    if args.json:
        text = profile_to_json(
            profile, seq=seq, method=args.method, since_ns=args.since_ns, lines=args.lines
        )
    else:
        text = render_profile(
            profile, _title(seq, args), color=colour_wanted(), max_nodes=args.max_nodes
        )
    emit(text)
    return 0


def _sequence_profile(store: Store, seq: bytes, args: argparse.Namespace) -> Profile:
    with paused_gc():  # millions of objects that all stay alive: nothing for it to collect
        data = store.load_sequence(seq)
        if not args.all_calls:
            data = fold_empty_hops(data)
        if not args.by_thread:  # read straight from the records, samples grafted on
            profile = sequence_profile(data, lines=args.lines)
            if profile is not None:
                return profile
        tree = merge_samples(build_tree(data), data, lines=args.lines)
        return profile_sequence(tree, by_thread=args.by_thread)


def _method_profile(
    store: Store, method: str, since_ns: int | None, limit: int, args: argparse.Namespace
) -> Profile:
    """Sequences are loaded and folded one at a time, so memory holds one tree at most."""
    found = store.find_sequences(method, since_ns=since_ns, limit=limit)
    skipped = 0

    def subtrees() -> Iterator[Node]:
        nonlocal skipped
        for seq in found:
            data = store.load_sequence(seq)
            if not args.all_calls:
                data = fold_empty_hops(data)
            tree = merge_samples(build_tree(data), data, lines=args.lines)
            skipped += tree.samples_skipped
            yield from method_subtrees(tree, data, method)

    profile = build_profile(subtrees(), sequences=len(found), skipped=0, by_thread=args.by_thread)
    return dataclasses.replace(profile, samples_skipped=skipped)


def _title(seq: bytes | None, args: argparse.Namespace) -> str:
    if seq is not None:
        return f"profile of sequence {seq.hex()}"
    title = f"profile of {args.method}"
    if args.since_ns is not None:
        title += f" since {format_local_time(args.since_ns)}"
    return title

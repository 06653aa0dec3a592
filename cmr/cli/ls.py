"""``cmr ls``: the most recent sequences, newest first, or those a query asks for."""

from __future__ import annotations

import argparse

from cmr.ages import AGE_GRAMMAR
from cmr.cli.common import (
    CliError,
    Commands,
    add_read_options,
    command,
    emit,
    milliseconds,
    non_negative_int,
    open_for_reading,
    parse_since,
)
from cmr.store.base import (
    KIND_REQUEST,
    KIND_SERVICE,
    KINDS,
    LISTED_STATUSES,
    SORT_DURATION,
    SORT_START,
    SequenceQuery,
)
from cmr.views.render import tables


def add_ls(commands: Commands) -> None:
    parser = command(
        commands,
        "ls",
        description=(
            "List the most recent sequences, newest first, with their duration, status and size, "
            "or those the options select: the root's name, the duration, the status, when they "
            "started, the host they ran on, newest or longest first. A status ending in ', "
            "lossy' means a traced process had to drop some events of the sequence; 'error' "
            "means the root call raised. The SEQ column is the shortest prefix of the id, of "
            "12 digits at least, that no other sequence in the repository shares: 'cmr show' "
            "and every other command accept it."
        ),
        examples=[
            "cmr ls",
            "cmr ls --limit 100",
            "cmr ls --root 'shop.checkout*' --min-duration 500 --since 1h",
            "cmr ls --status error --since 2026-11-26T09:00",
            "cmr ls --sort duration --limit 10   # the ten slowest",
            "cmr ls --json | jq '.[0].seq'",
        ],
        handler=_ls,
    )
    parser.add_argument(
        "--limit",
        type=non_negative_int,
        default=20,
        metavar="N",
        help="how many sequences (default: 20)",
    )
    add_query_options(parser)
    parser.add_argument(
        "--sort",
        choices=(SORT_START, SORT_DURATION),
        default=SORT_START,
        help="start: newest first (the default); duration: longest first, running ones last",
    )
    add_read_options(parser)


def add_query_options(parser: argparse.ArgumentParser) -> None:
    """The options that select sequences (``SequenceQuery``), but for the order."""
    add_kind_option(parser)
    add_root_option(parser)
    add_min_duration_option(parser)
    parser.add_argument(
        "--max-duration",
        type=milliseconds,
        metavar="MS",
        dest="max_duration_ns",
        help="took at most MS milliseconds (or a number and a unit: 250us, 1.5s, 2m)",
    )
    parser.add_argument(
        "--status",
        choices=LISTED_STATUSES,
        help="complete, running, incomplete (it never will end: its process ended or was lost), "
        "or error (complete, and the root call raised)",
    )
    add_since_option(parser)
    parser.add_argument(
        "--until",
        type=parse_since,
        metavar="AGE",
        dest="until_ns",
        help="started at least AGE ago, or at or before an ISO time",
    )
    parser.add_argument("--host", metavar="NAME", help="one of its processes ran on host NAME")


def add_kind_option(parser: argparse.ArgumentParser) -> None:
    """``--kind``, as every command that lists sequences takes it."""
    parser.add_argument(
        "--kind",
        choices=KINDS,
        default=KIND_REQUEST,
        help="request (the default): what the program served or ran; service: what a process "
        "does to serve (an ASGI lifespan, a server's start-up), left out unless asked; all",
    )


def add_root_option(parser: argparse.ArgumentParser) -> None:
    """``--root PATTERN``, as every command that selects sequences takes it."""
    parser.add_argument(
        "--root",
        metavar="PATTERN",
        help="the root call's name matches PATTERN (shell-style, case-sensitive: 'shop.*')",
    )


def add_min_duration_option(parser: argparse.ArgumentParser) -> None:
    """``--min-duration MS``, as ``cmr ls`` and ``cmr tail`` take it."""
    parser.add_argument(
        "--min-duration",
        type=milliseconds,
        metavar="MS",
        dest="min_duration_ns",
        help="took at least MS milliseconds (fractions allowed, or a number and a unit: 250us, "
        "1.5s, 2m; sequences not ended are left out)",
    )


def add_since_option(parser: argparse.ArgumentParser) -> None:
    """``--since AGE``, as ``cmr ls`` and ``cmr top`` take it."""
    parser.add_argument(
        "--since",
        type=parse_since,
        metavar="AGE",
        dest="since_ns",
        help=f"started at most AGE ago ({AGE_GRAMMAR}), or at or after an ISO time",
    )


def query_from(args: argparse.Namespace, sort: str = SORT_START) -> SequenceQuery:
    """The query the options of ``add_query_options`` ask for."""
    if (
        args.min_duration_ns is not None
        and args.max_duration_ns is not None
        and args.min_duration_ns > args.max_duration_ns
    ):
        raise CliError("--min-duration is above --max-duration: nothing could match")
    if args.since_ns is not None and args.until_ns is not None and args.since_ns > args.until_ns:
        raise CliError("--since is after --until: nothing could match")
    return SequenceQuery(
        root=args.root,
        min_duration_ns=args.min_duration_ns,
        max_duration_ns=args.max_duration_ns,
        status=args.status,
        since_ns=args.since_ns,
        until_ns=args.until_ns,
        host=args.host,
        sort=sort,
        kind=args.kind,
    )


def _ls(args: argparse.Namespace) -> int:
    query = query_from(args, args.sort)
    store = open_for_reading(args.db)
    unfiltered = query == SequenceQuery(sort=query.sort, kind=KIND_REQUEST)
    try:
        summaries = store.list_sequences(args.limit, query)
        short_ids = {} if args.json else store.short_ids([line.seq for line in summaries])
        # nothing but service sequences yet (a server started, no request served): say so
        services = (
            bool(store.list_sequences(1, SequenceQuery(kind=KIND_SERVICE)))
            if unfiltered and not summaries and not args.json
            else False
        )
    finally:
        store.close()
    if args.json:
        from cmr.views.render import json as json_render

        emit(json_render.summaries_to_json(summaries))
    elif services:
        emit("no requests yet; service sequences only: cmr ls --kind service")
    elif not summaries and not unfiltered:
        emit("no sequence matches")
    else:
        emit(tables.render_sequence_list(summaries, short_ids))
    return 0

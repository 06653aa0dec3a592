"""``cmr ls``: the most recent sequences, newest first."""

from __future__ import annotations

import argparse

from cmr.cli._support import (
    Commands,
    add_read_options,
    command,
    emit,
    non_negative_int,
    open_for_reading,
)
from cmr.views.render import json as json_render
from cmr.views.render import tables


def add_ls(commands: Commands) -> None:
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

"""``cmr stats``: ingest counters, the processes heard from, their samplers."""

from __future__ import annotations

import argparse

from cmr.cli.common import Commands, add_read_options, command, emit, open_for_reading
from cmr.store import LOST_GRACE_MS, MISSED_HEARTBEATS
from cmr.views.render import json as json_render
from cmr.views.render import tables


def add_stats(commands: Commands) -> None:
    parser = command(
        commands,
        "stats",
        description=(
            "Show what the repository received: batches, duplicates (resent after a lost "
            "acknowledgement), events, stack samples, frames rejected by reason, and per process "
            "the events it reported dropped, its heartbeat interval, when it was last heard from "
            "and its state: alive, ended (shut down cleanly) or lost (silent for longer than "
            f"{MISSED_HEARTBEATS} heartbeats plus {LOST_GRACE_MS} ms); then, for the processes "
            "that ran the stack sampler, its mode and configured interval, the interval it "
            "paced itself to (to hold its cost near 1 %) and the longest it used, ticks, late "
            "ticks and its cost."
        ),
        examples=["cmr stats", "cmr stats --json"],
        handler=_stats,
    )
    add_read_options(parser)


def _stats(args: argparse.Namespace) -> int:
    store = open_for_reading(args.db)
    try:
        stats = store.stats()
    finally:
        store.close()
    emit(json_render.stats_to_json(stats) if args.json else tables.render_stats(stats))
    return 0

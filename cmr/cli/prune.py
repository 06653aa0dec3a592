"""``cmr prune --older-than 7d``: retention for every store.

The repository must exist already: pruning never creates one, so a mistyped
``--db`` fails instead of pruning a new, empty file.
"""

from __future__ import annotations

import argparse
import json
import time

from cmr.ages import AGE_GRAMMAR
from cmr.cli.common import (
    DB_HELP,
    Commands,
    command,
    emit,
    open_for_reading,
    parse_age,
)
from cmr.cli.progress import HELP as PROGRESS_HELP
from cmr.store.base import PruneResult
from cmr.views.render.tables import format_local_time


def add_prune(commands: Commands) -> None:
    parser = command(
        commands,
        "prune",
        description=(
            "Remove every sequence that started longer ago than --older-than, whole (its calls, "
            "hand-offs and lossy marks), the stack samples taken before then, the record of "
            "batches received before then, and the processes last heard from before then that "
            "nothing left names. The totals 'cmr stats' counts stay. Safe while 'cmr serve' "
            "writes to the same repository; on PostgreSQL whole day partitions are dropped. "
            + PROGRESS_HELP
        ),
        examples=[
            "cmr prune --older-than 7d",
            "cmr prune --older-than 12h --db postgresql://invoseq@db.internal/invoseq",
            "cmr prune --older-than 30d --json",
        ],
        handler=_prune,
    )
    parser.add_argument(
        "--older-than",
        required=True,
        type=parse_age,
        metavar="AGE",
        dest="age_ns",
        help=f"how old is too old: {AGE_GRAMMAR}",
    )
    parser.add_argument("--json", action="store_true", help="print what was removed as JSON")
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def _prune(args: argparse.Namespace) -> int:
    from cmr.cli import progress
    from cmr.store import open_store

    before_ns = time.time_ns() - args.age_ns
    open_for_reading(args.db).close()  # it exists (and is readable) before anything is written
    store = open_store(args.db)
    shown = progress.start("pruning", unit="steps")
    try:
        result = store.prune(before_ns, on_step=shown.update)
    finally:
        shown.close()
        store.close()
    emit(render_prune(result, before_ns, as_json=args.json))
    return 0


def render_prune(result: PruneResult, before_ns: int, *, as_json: bool) -> str:
    if as_json:
        return json.dumps(
            {
                "before_ns": before_ns,
                "sequences": result.sequences,
                "samples": result.samples,
                "processes": result.processes,
            }
        )
    return (
        f"removed {_count(result.sequences, 'sequence')}, {_count(result.samples, 'sample')} "
        f"and {_count(result.processes, 'process', 'processes')} "
        f"from before {format_local_time(before_ns)}"
    )


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"

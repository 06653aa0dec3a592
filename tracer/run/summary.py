"""What ``tracer run`` prints after the program when it embedded the repository: the slowest
sequences of this run and the tree of the slowest, the pyinstrument experience.

Only sequences whose root started after ``tracer run`` did are this run's (the database may hold
earlier runs). The tree hides calls shorter than 1 % of the sequence and stops after
``MAX_TREE_LINES`` lines; the hints below it show how to see everything with ``cmr``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from cmr.store import SequenceSummary

#: How many of the most recent sequences are looked at for this run's.
SCAN_LIMIT: Final = 10_000
#: How many sequences the report lists.
LISTED: Final = 5
MAX_TREE_LINES: Final = 80
#: Calls shorter than this fraction of the sequence are left out of the printed tree.
MIN_SHARE: Final = 0.01


@dataclass(frozen=True, slots=True)
class ReportOptions:
    db: str
    started_ns: int  # wall clock, before the program started
    db_flag: str | None  # ``--db PATH`` for the hints when the database is not the default
    patterns: tuple[str, ...]
    color: bool = False


def render_report(options: ReportOptions) -> str:
    """The report as text. Raises cmr's StoreError when the database cannot be read."""
    from cmr.store import open_store
    from cmr.store.base import KIND_REQUEST, SequenceQuery
    from cmr.views.pipeline import render_sequence
    from cmr.views.render.tables import render_sequence_list

    store = open_store(options.db, readonly=True)
    try:  # a process's service sequences (cmr ls --kind service) are not this run's work
        recent = store.list_sequences(SCAN_LIMIT, SequenceQuery(kind=KIND_REQUEST))
        ours = [summary for summary in recent if summary.start_ns >= options.started_ns]
        if not ours:
            return (
                "tracer: no traced calls in this run (traced modules: "
                f"{', '.join(options.patterns)}); choose others with --include"
            )
        slowest = sorted(ours, key=_slowness)[:LISTED]
        top = slowest[0]
        short_ids = store.short_ids([summary.seq for summary in slowest])
        tree = render_sequence(
            store,
            top.seq,
            min_duration_ns=0
            if top.end_ns is None
            else int((top.end_ns - top.start_ns) * MIN_SHARE),
            color=options.color,
        )
    finally:
        store.close()
    counted = (
        f"{len(ours)}+" if len(recent) == SCAN_LIMIT and len(ours) == len(recent) else len(ours)
    )
    lines = [
        f"tracer: {counted} sequence{'s' if len(ours) != 1 else ''} in this run"
        + (f"; the {len(slowest)} slowest:" if len(ours) > 1 else ":"),
        "",
        render_sequence_list(slowest, short_ids),
        "",
        f"slowest, calls under {MIN_SHARE:.0%} of it hidden:" if top.end_ns else "slowest:",
        _clip(tree, MAX_TREE_LINES),
        "",
        *_hints(
            (f"cmr show {short_ids[top.seq]}", "the full tree"),
            ("cmr ls", "all sequences, newest first"),
            db_flag=options.db_flag,
        ),
    ]
    return "\n".join(lines)


def _slowness(summary: SequenceSummary) -> tuple[bool, int]:
    """Finished sequences first, longest first; unfinished ones (their duration unknown) last."""
    if summary.end_ns is None:
        return True, -summary.start_ns
    return False, -(summary.end_ns - summary.start_ns)


def _clip(text: str, limit: int) -> str:
    lines = text.splitlines()
    if len(lines) <= limit:
        return text
    return "\n".join([*lines[:limit], f"... {len(lines) - limit} more lines"])


def _hints(*hints: tuple[str, str], db_flag: str | None) -> list[str]:
    """Commands to go further, with ``--db`` when the database is not the default one."""
    suffix = "" if db_flag is None else f" --db {shlex.quote(db_flag)}"
    commands = [command + suffix for command, _ in hints]
    width = max(len(command) for command in commands)
    return [
        f"  {command.ljust(width)}  # {comment}"
        for command, (_, comment) in zip(commands, hints, strict=True)
    ]

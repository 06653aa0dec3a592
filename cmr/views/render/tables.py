"""Plain-text tables for ``cmr ls``, ``cmr show --threads`` and ``cmr stats``: aligned columns,
nothing to install."""

from __future__ import annotations

import datetime

from cmr.store.base import SEQ_PREFIX_MIN, SequenceSummary
from cmr.store.listing import listed_status
from cmr.views.render.terms import format_duration, printable

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # cmr ls prints no tree: the views load for the one table that shows one
    from collections.abc import Mapping
    from typing import Final

    from cmr.store.base import StoreStats
    from cmr.views.model import SequenceTree
    from cmr.views.tree.processors import ThreadActivity

#: Hex digits of a sequence id shown in listings at least (``Store.short_ids`` gives more where
#: another id shares them); ``cmr show`` accepts any unambiguous prefix.
SEQ_PREFIX_LEN = SEQ_PREFIX_MIN


def format_local_time(ns: int) -> str:
    """Wall-clock nanoseconds as local time to the millisecond."""
    moment = datetime.datetime.fromtimestamp(ns / 1e9)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def table(header: list[str], rows: list[list[str]], right: frozenset[int] = frozenset()) -> str:
    """Columns padded to their widest cell; columns in ``right`` align right (numbers). Cells
    are shown ``printable``: a root's name, a host or a thread's name came from the wire."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [len(cell) for cell in header]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


SEQUENCE_HEADER: Final = ["SEQ", "START", "DURATION", "STATUS", "CALLS", "THREADS", "PROCS", "ROOT"]
#: The columns of a sequence line aligned right (numbers).
SEQUENCE_NUMBERS: Final = frozenset({2, 4, 5, 6})
#: Column widths of a streamed sequence line (``cmr tail``): wide enough for most values.
SEQUENCE_WIDTHS: Final = (12, 23, 9, 10, 6, 7, 5)


def render_sequence_list(
    summaries: list[SequenceSummary], short_ids: Mapping[bytes, str] | None = None
) -> str:
    """One line per sequence, most recent first (the order the store returns). A sequence some
    of whose events a process dropped says so in its status ("complete, lossy"). ``short_ids``:
    the prefix to print of each id (``Store.short_ids``: unique in the repository); without,
    the first SEQ_PREFIX_LEN digits."""
    if not summaries:
        return "no sequences recorded yet"
    ids = short_ids or {}
    rows = [sequence_cells(summary, ids.get(summary.seq)) for summary in summaries]
    return table(SEQUENCE_HEADER, rows, right=SEQUENCE_NUMBERS)


def sequence_cells(summary: SequenceSummary, short_id: str | None = None) -> list[str]:
    """The cells of a sequence's line, in SEQUENCE_HEADER's order; ``short_id``: the prefix of
    its id to print (else the first SEQ_PREFIX_LEN digits)."""
    return [
        summary.seq.hex()[:SEQ_PREFIX_LEN] if short_id is None else short_id,
        format_local_time(summary.start_ns),
        "-" if summary.end_ns is None else format_duration(summary.end_ns - summary.start_ns),
        _listed_status(summary),
        str(summary.invocations),
        str(summary.threads),
        str(summary.processes),
        summary.root,
    ]


def fixed_line(cells: list[str]) -> str:
    """A sequence line (or the header) in SEQUENCE_WIDTHS, for lines printed one at a time."""
    cells = [printable(cell) for cell in cells]
    padded = [
        cell.rjust(width) if at in SEQUENCE_NUMBERS else cell.ljust(width)
        for at, (cell, width) in enumerate(zip(cells, SEQUENCE_WIDTHS, strict=False))
    ]
    return "  ".join([*padded, *cells[len(SEQUENCE_WIDTHS) :]]).rstrip()


def _listed_status(summary: SequenceSummary) -> str:
    """``listing.listed_status``, with ``, lossy`` after it when a process dropped some of the
    sequence's events."""
    status = listed_status(summary)
    return f"{status}, lossy" if summary.lossy else status


def render_thread_activity(tree: SequenceTree, activity: list[ThreadActivity]) -> str:
    """The sequence's header line, then one line per thread in order of first activity; FIRST is
    when the thread joined, counted from the sequence's first call."""
    from cmr.views.render.text import render_header

    if not activity:
        return render_header(tree) + "\nno threads: no invocation of this sequence was received"
    origin = activity[0].first_start_ns
    rows = [
        [
            f"{entry.process.host}:{entry.process.pid}",
            str(entry.thread.tid),
            entry.thread.name,
            str(entry.invocations),
            format_duration(entry.busy_ns),
            "+" + format_duration(entry.first_start_ns - origin),
        ]
        for entry in activity
    ]
    header = ["PROCESS", "TID", "THREAD", "CALLS", "BUSY", "FIRST"]
    return render_header(tree) + "\n" + table(header, rows, right=frozenset({1, 3, 4, 5}))


def render_stats(stats: StoreStats) -> str:
    """Counters, then one line per process: its heartbeat interval ("-": it promised none), when
    it was last heard from, and whether it is alive, ended (shut down cleanly) or lost (silent
    past its heartbeat bound). Then, for the processes that ran a stack sampler, its mode and
    configured interval, the interval it paced itself to as of its latest report and the longest
    it used ("-": a tracer that predates pacing), ticks, late ticks and its own cost."""
    rejected = ", ".join(f"{reason} {count}" for reason, count in sorted(stats.rejected.items()))
    lines = [
        f"batches            {stats.batches}",
        f"duplicate batches  {stats.duplicate_batches}",
        f"events             {stats.events}",
        f"samples            {stats.samples}",
        f"rejected frames    {rejected or 'none'}",
    ]
    if not stats.processes:
        lines.append("processes          none")
        return "\n".join(lines)
    rows = [
        [
            f"{process.host}:{process.pid}",
            f"{process.puid:016x}",
            str(process.dropped),
            format_duration(process.heartbeat_ms * 1_000_000) if process.heartbeat_ms else "-",
            format_local_time(process.last_seen_ns),
            process.state,
        ]
        for process in stats.processes
    ]
    header = ["PROCESS", "PUID", "DROPPED", "HEARTBEAT", "LAST SEEN", "STATE"]
    lines.append("")
    lines.append(table(header, rows, frozenset({2, 3})))
    sampled = []
    for process in stats.processes:
        report = stats.samplers.get(process.puid)
        if report is not None:
            sampled.append(
                [
                    f"{process.host}:{process.pid}",
                    f"{process.puid:016x}",
                    f"{report.mode} {format_duration(report.interval_ms * 1_000_000)}",
                    _paced(report.current_interval_ns, report.longest_interval_ns),
                    str(report.ticks),
                    str(report.late_ticks),
                    format_duration(report.cost_ns),
                    str(report.dropped_samples),
                ]
            )
    if sampled:
        lines.append("")
        header = [
            "PROCESS",
            "PUID",
            "SAMPLER",
            "PACED (LONGEST)",
            "TICKS",
            "LATE",
            "COST",
            "DROPPED",
        ]
        lines.append(table(header, sampled, frozenset({3, 4, 5, 6, 7})))
    return "\n".join(lines)


def _paced(current_ns: int, longest_ns: int) -> str:
    if not current_ns:
        return "-"
    return f"{format_duration(current_ns)} ({format_duration(longest_ns)})"

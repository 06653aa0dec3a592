"""Case 4: ``cmr show`` and ``cmr profile`` on one sequence of 10 k, 100 k and 1 M invocations.

Each size gets its own SQLite repository, built directly with ``store.ingest`` of synthetic
batches (``synthetic.one_sequence``: fan-out 10, depth-first). The commands run as a user runs
them, ``python -m cmr ...`` in a subprocess with the output thrown away, interleaved with
``python -m cmr --help``: the floor (interpreter start, imports) that every command pays.
``cmr ls --limit 1`` is timed too: it reads the listing line kept at ingest, so it must not grow
with the sequence. Every row is a ratio to the floor, with issue 18's targets: ``ls`` within 2x
the floor at every size; at 1 M invocations ``show`` within 12x (2 s on a quiet machine),
``profile`` within 19x (3 s), and ``show``'s peak RSS within 300 MiB. With ``INVOSEQ_TEST_PG``
set, each size is also stored in a scratch schema of that PostgreSQL server and the same
commands are timed on it, as a ratio to SQLite's (within 1.5x). The note says how the cost
per node grew from the size below (linear would keep it). The 1 M case runs only without
--quick; if building it takes too long it is capped, and the cap is reported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from benchmarks import postgres, synthetic
from benchmarks.harness import CaseResult, Row, Settings, Target, interleave, median, spread
from benchmarks.processes import clean_environment
from cmr.store import open_store
from invoseq import wire

NAME: Final = "views"
#: Issue 18: listing does not depend on the size of what it lists.
LS_ANY: Final = (Target("ls ≤ 2x floor", "<=", 2.0, on="ratio"), Target("ls ≤ 0.3 s", "<=", 0.3))
#: Issue 18, at 1 M invocations (absolute times on a quiet machine).
SHOW_1M: Final = (
    Target("show ≤ 12x floor", "<=", 12.0, on="ratio"),
    Target("show ≤ 2 s", "<=", 2.0),
)
PROFILE_1M: Final = (
    Target("profile ≤ 19x floor", "<=", 19.0, on="ratio"),
    Target("profile ≤ 3 s", "<=", 3.0),
)
#: Issue 18: every read command on PostgreSQL as fast as on SQLite ±50 %.
PG_READS: Final = (Target("PostgreSQL ≤ 1.5x SQLite", "<=", 1.5, on="ratio"),)
COMMANDS: Final = ("ls", "show", "profile")
#: Issue 18: peak RSS of `cmr show` on 1 M invocations.
SHOW_1M_PEAK_MIB: Final = 300.0
#: The longest the 1 M repository may take to build before it is capped.
BUILD_CAP_S: Final = 45.0
#: The longest one command may run before it is killed (the run then reports the case failed).
COMMAND_TIMEOUT_S: Final = 300.0


def build(path: Path | str, invocations: int, cap_s: float) -> tuple[bytes, int, float]:
    """A repository holding one sequence of ``invocations`` calls: (seq, invocations stored,
    seconds). Stops early, with the sequence cut short, once ``cap_s`` is spent."""
    started = time.perf_counter()
    traffic = synthetic.one_sequence(puid=7, invocations=invocations)
    stored = 0
    store = open_store(str(path))
    try:
        for batch in synthetic.decoded(traffic):
            store.ingest(batch, time.time_ns())
            stored += sum(isinstance(e, wire.Start) for chunk in batch.chunks for e in chunk.events)
            if time.perf_counter() - started > cap_s:
                break
    finally:
        store.close()
    return traffic.seqs[0], stored, time.perf_counter() - started


class Commands:
    """Runs ``python -m cmr ...`` on one repository; remembers each command's peak RSS.

    A child's peak RSS starts from this process's own (it is inherited through fork), so a peak
    no higher than ours is not the command's: it is not recorded."""

    def __init__(self, db: Path | str) -> None:
        self.db = db
        self.peak_mib: dict[str, float] = {}

    def timed(self, name: str, *args: str) -> float:
        command = [sys.executable, "-m", "cmr", *args]
        if name != "floor":
            command[3:3] = ["--db", str(self.db)]
        started = time.perf_counter()
        process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=clean_environment(NO_COLOR="1"),
            cwd=Path(__file__).resolve().parent.parent,
        )
        watchdog = threading.Timer(COMMAND_TIMEOUT_S, process.kill)  # bounds the wait below
        watchdog.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)  # also gives the child's peak RSS
        finally:
            watchdog.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        took = time.perf_counter() - started
        if process.returncode != 0:
            raise RuntimeError(f"python -m cmr {' '.join(args)} failed")
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if usage.ru_maxrss > 1.1 * own:
            self.peak_mib[name] = max(self.peak_mib.get(name, 0.0), usage.ru_maxrss / 1024)
        return took


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    sizes = [10_000, 100_000] if settings.quick else [10_000, 100_000, 1_000_000]
    rounds = {10_000: 2, 100_000: 1} if settings.quick else {10_000: 3, 100_000: 2, 1_000_000: 1}
    measured: list[tuple[str, int, dict[str, list[float]], dict[str, float]]] = []
    pg_server = postgres.server()
    if pg_server is None:
        result.notes.append(f"PostgreSQL reads skipped: {postgres.PG_ENV} is not set")
    pg_rows: list[tuple[str, dict[str, float], dict[str, float]]] = []  # label, PG, SQLite
    for size in sizes:
        db = settings.workdir / f"views-{size}.sqlite"
        seq, stored, built_s = build(db, size, BUILD_CAP_S)
        label = f"{size // 1000} k" if size < 1_000_000 else f"{size // 1_000_000} M"
        result.notes.append(f"{label}: built in {built_s:.1f} s ({stored} invocations stored)")
        if stored < size:
            result.notes.append(
                f"{label}: building took over {BUILD_CAP_S:.0f} s, capped at {stored} invocations "
                "(the sequence is cut short: its open calls show as running)"
            )
        with contextlib.ExitStack() as stack:
            commands = {"": Commands(db)}
            seqs = {"": seq}
            if pg_server is not None:
                url = stack.enter_context(postgres.scratch_schema(pg_server))
                seqs["pg_"], pg_stored, pg_built_s = build(url, size, BUILD_CAP_S)
                result.notes.append(
                    f"{label}: PostgreSQL built in {pg_built_s:.1f} s ({pg_stored} stored)"
                )
                commands["pg_"] = Commands(url)
            variants: dict[str, Callable[[], float]] = {
                "floor": functools.partial(commands[""].timed, "floor", "--help")
            }
            for prefix, cmr in commands.items():
                variants[f"{prefix}ls"] = functools.partial(cmr.timed, "ls", "ls", "--limit", "1")
                shown = seqs[prefix].hex()
                variants[f"{prefix}show"] = functools.partial(cmr.timed, "show", "show", shown)
                variants[f"{prefix}profile"] = functools.partial(
                    cmr.timed, "profile", "profile", shown
                )
            series = interleave(
                variants,
                rounds=rounds[size],
                min_rounds=1,
                budget_s=settings.budget_s / len(sizes),
                warmup=size < 100_000 and not settings.quick,
            )
        result.raw[label] = {"invocations": stored, "build_s": built_s, **series}
        result.raw[label]["peak_rss_mib"] = commands[""].peak_mib
        measured.append((label, stored, series, commands[""].peak_mib))
        if "pg_" in commands:
            pg_rows.append(
                (
                    label,
                    {c: median(series[f"pg_{c}"]) for c in COMMANDS},
                    {c: median(series[c]) for c in COMMANDS},
                )
            )
        for path in settings.workdir.glob(f"views-{size}.sqlite*"):
            os.unlink(path)
    # One floor for every size, from all its samples: a per-size floor of two or three
    # samples would move the ratios by its own noise.
    floors = [t for _, _, series, _ in measured for t in series["floor"]]
    result.noise["floor"] = spread(floors)
    floor = median(floors)
    previous: dict[str, tuple[int, float]] = {}  # command -> (invocations, time above the floor)
    for label, stored, series, peaks in measured:
        for command in ("ls", "show", "profile"):
            took = median(series[command])
            row = _row(
                command,
                label=label,
                nodes=stored,
                took=took,
                floor=floor,
                smaller=previous.get(command),
            )
            peak = f"; peak RSS {peaks[command]:.0f} MiB" if command in peaks else ""
            result.rows.append(dataclasses.replace(row, note=row.note + peak))
            previous[command] = (stored, took - floor)
        show_peak = peaks.get("show")
        if stored >= 1_000_000 and show_peak is not None:
            result.rows.append(
                Row(
                    case=NAME,
                    name=f"cmr show, one sequence of {label} invocations: peak RSS",
                    value=show_peak,
                    unit="MiB",
                    targets=(Target("peak ≤ 300 MiB", "<=", SHOW_1M_PEAK_MIB),),
                )
            )
    for label, on_pg, on_sqlite in pg_rows:
        for command in COMMANDS:
            shown = "ls --limit 1" if command == "ls" else command
            result.rows.append(
                Row(
                    case=NAME,
                    name=f"cmr {shown} on PostgreSQL, one sequence of {label} invocations",
                    value=on_pg[command],
                    unit="s",
                    baseline=on_sqlite[command],
                    baseline_name="the same command on SQLite",
                    ratio=on_pg[command] / on_sqlite[command],
                    targets=PG_READS,
                )
            )
    return result


def _row(
    command: str,
    *,
    label: str,
    nodes: int,
    took: float,
    floor: float,
    smaller: tuple[int, float] | None,
) -> Row:
    per_node_us = 1e6 * (took - floor) / nodes
    shown = "ls --limit 1" if command == "ls" else command
    targets: tuple[Target, ...] = ()
    if command == "ls":
        targets = LS_ANY
    elif nodes >= 1_000_000:
        targets = SHOW_1M if command == "show" else PROFILE_1M
    growth = ""
    if smaller is not None:
        growth = (
            f" (was {1e6 * smaller[1] / smaller[0]:.1f} µs at {smaller[0]} nodes; linear keeps it)"
        )
    return Row(
        case=NAME,
        name=f"cmr {shown}, one sequence of {label} invocations",
        value=took,
        unit="s",
        baseline=floor,
        baseline_name="python -m cmr --help (start-up floor)",
        ratio=took / floor,
        targets=targets,
        note=f"{per_node_us:.1f} µs per node above the floor{growth}",
    )

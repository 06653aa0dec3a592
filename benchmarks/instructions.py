"""Instructions, not time: what a traced call, a traced generator and a generator's step cost
in CPU instructions, counted by valgrind's callgrind (needs ``valgrind``; a minute or two).

On a machine whose speed moves by tens of percent from one minute to the next (a shared VM),
the overhead case's nanoseconds cannot tell a change of a few percent from the drift; the
instructions a piece of work executes are the same from run to run. They are not time (a cache
miss or an allocation's first touch of a page costs many instructions' worth and counts as one),
so a change is measured both ways: instructions here, time in ``--only overhead``.

``python -m benchmarks.instructions [--items N]`` runs each shape of the overhead case
(``benchmarks.overhead_worker``: a nested sync call, a one-item generator, a generator's resume
and yield, each traced under ``tracer.testing.capture`` with the C accelerator if it is built,
and the same untraced) in a child process under callgrind twice, with N items and with 2N, after
a warm-up chunk, and counts its main thread's instructions: the difference over N is one item's
instructions, start-up and imports cancelled (recording only: the sender's work is its own
thread's, left out). The rows: instructions an item, traced; the instructions the tracer adds
(traced less the same shape bare); and that as a multiple of what it adds to the sync call
(issue 33 goal 1 asks a generator or coroutine call to cost at most 1.5 times a sync call).

``--real PASSES`` counts the real case's program instead (sqlparse, ``benchmarks.real_program``),
bare and under ``tracer run --include 'sqlparse.*'`` sending to a ``cmr serve --memory`` of its
own, with one pass and with ``1 + PASSES``: its main thread's instructions, and what the tracer
adds per recorded call in the passes after the first (start-up and the first pass cancel; the
sender's encoding, on its own thread, is left out; the sampler is off, its ticks being by the
clock, which valgrind slows fifty times). Two passes take about five minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

#: shape -> (the traced chunk, the same bare), both from benchmarks.overhead_worker
SHAPES: Final = {
    "sync call, nested in one root": ("flat_root", "loop_bare"),
    "generator of one item, nested in one root": ("generator_root", "loop_generator_bare"),
    "a traced generator's resume and yield, per item": ("steps_root", "steps_bare"),
}
WARM_UP: Final = 2_000
TOTALS: Final = re.compile(r"^totals:\s*(\d+)", re.MULTILINE)
ROOT: Final = Path(__file__).resolve().parent.parent


def child(name: str, items: int) -> None:
    """Run ``name``'s chunk after a warm-up one, tracing on, and leave without tearing down."""
    from benchmarks import overhead_worker
    from tracer.testing import capture

    run: Callable[[int], None] = getattr(overhead_worker, name)
    hour = 3_600_000
    with capture(flush_interval_ms=hour, heartbeat_ms=hour, sample_interval_ms=0):
        run(WARM_UP)
        run(items)
        sys.stdout.flush()
        os._exit(0)  # no flush, shutdown or teardown counted: the same in every child


def counted(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """The instructions ``command``'s main thread executes under callgrind, and its stdout."""
    with tempfile.TemporaryDirectory() as out:
        valgrind = ["valgrind", "--tool=callgrind", "--separate-threads=yes"]
        valgrind.append(f"--callgrind-out-file={out}/callgrind.%p")
        environment = {**env, "INVOSEQ_CLOCK": "monotonic", "PYTHONHASHSEED": "0"}
        done = subprocess.run(
            valgrind + command,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
            env=environment,
            cwd=ROOT,
        )
        main_thread = sorted(Path(out).glob("callgrind.*-01"))
        found = TOTALS.search(main_thread[0].read_text()) if main_thread else None
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind gave no count for {command[-2:]}: {done.stderr[-2000:]}")
    return int(found.group(1)), done.stdout


_compiled = False


def compiled() -> None:
    """Compile the project's modules once, as a user's first run leaves them: else a child that
    imports one not compiled yet (a fresh checkout, PYTHONDONTWRITEBYTECODE) counts compiling
    it, and the first of two children counts it where the second does not."""
    global _compiled
    if not _compiled:
        command = [sys.executable, "-m", "compileall", "-q", "tracer", "cmr", "invoseq"]
        subprocess.run([*command, "benchmarks"], cwd=ROOT, check=True, env=writing_bytecode())
        _compiled = True


def instructions(name: str, items: int) -> int:
    """What the main thread of a child running ``name`` with ``items`` items executes. Only the
    main thread's: the sender's thread wakes on timers, and under valgrind, tens of times slower,
    it wakes more often the busier the machine is. The clock is ``clock_gettime`` (the TSC's
    calibration takes pairs of readings until two are close enough, which valgrind makes rare),
    and the hashes of strings are the same in every run (PYTHONHASHSEED)."""
    compiled()
    command = [sys.executable, "-m", "benchmarks.instructions", "--child", name, str(items)]
    return counted(command, writing_bytecode())[0]


def per_item(name: str, items: int) -> float:
    return (instructions(name, 2 * items) - instructions(name, items)) / items


def writing_bytecode() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def real(passes: int) -> None:
    """The real case's program (``benchmarks.real_program``, sqlparse) bare and under ``tracer
    run --include 'sqlparse.*'`` sending to a ``cmr serve --memory`` of its own, with one pass
    and with ``1 + passes``: its main thread's instructions, and what the tracer adds per
    recorded call in the passes after the first (events sent over two). The first pass and the
    runs' start and end (``tracer run``'s imports, each code object's instrumentation, the
    methods interned) are the same in both runs and cancel: a pass of 146 k calls would
    otherwise carry them, about 80 % more on 3.12."""
    from benchmarks.processes import clean_environment, start_reporting, stop
    from cmr.defaults import READY_PREFIX

    compiled()
    with tempfile.TemporaryDirectory() as workdir:
        serve = [sys.executable, "-m", "cmr", "serve", "--memory", "--bind"]
        server, endpoint = start_reporting([*serve, f"ipc://{workdir}/cmr.sock"], READY_PREFIX)
        try:
            # Valgrind runs one thread at a time: the sender, starved, would leave the bound
            # full and calls untraced (cheaper), which no two runs do alike. Room for them all.
            # The sampler ticks by the clock, and valgrind runs the program some fifty times
            # slower: ticks a call would be fifty times a real run's, and differ run to run.
            room = str(1 << 31)
            env = clean_environment(
                INVOSEQ_ENDPOINT=endpoint,
                INVOSEQ_MAX_BUFFERED_BYTES=room,
                INVOSEQ_SAMPLE_INTERVAL_MS="0",
                PYTHONPATH=str(ROOT),
            )
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            one, more = (_real_run(count, env) for count in (1, 1 + passes))
        finally:
            stop(server)
    for result in (one, more):
        if result["dropped_events"]:
            print(f"{result['dropped_events']:,} events dropped: the counts are not comparable")
    calls = (more["sent_events"] - one["sent_events"]) / 2
    bare = more["bare"] - one["bare"]
    traced = more["traced"] - one["traced"]
    print(f"the real program, {passes} passes after the first, its main thread: bare {bare:,}")
    print(f"instructions, traced {traced:,} ({calls:,.0f} calls recorded): ", end="")
    print(f"{(traced - bare) / calls:,.0f} a call")


def _real_run(passes: int, env: dict[str, str]) -> dict[str, int]:
    """The main thread's instructions of the real program with ``passes`` passes, bare and
    traced, and the events the traced run sent and dropped."""
    from benchmarks.processes import RESULT_PREFIX

    program = ["-m", "benchmarks.real_program", json.dumps({"passes": passes, "statements": 12})]
    bare, _ = counted([sys.executable, *program], env)
    tracer = [sys.executable, "-m", "tracer", "run", "--no-report"]
    traced, out = counted([*tracer, "--include", "sqlparse.*", *program], env)
    result = json.loads(out[out.index(RESULT_PREFIX) + len(RESULT_PREFIX) :].splitlines()[0])
    return {
        "bare": bare,
        "traced": traced,
        "sent_events": result["sent_events"],
        "dropped_events": result["dropped_events"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__)
    parser.add_argument("--items", type=int, default=20_000, help="items a chunk (default 20,000)")
    parser.add_argument(
        "--real", type=int, metavar="PASSES", help="count the real case's program instead"
    )
    parser.add_argument("--child", nargs=2, metavar=("CHUNK", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("benchmarks.instructions: valgrind is not installed", file=sys.stderr)
        return 2
    if args.real:
        real(args.real)
        return 0
    from tracer._core import accel

    path = "C accelerator" if accel.speedups is not None else "pure Python"
    print(f"Python {sys.version.split()[0]}, {path}, {args.items:,} items a chunk")
    print("| shape | instructions an item, traced | added by the tracer | added / sync call's |")
    print("|---|---|---|---|")
    sync_added = 0.0
    for shape, (traced, bare) in SHAPES.items():
        total = per_item(traced, args.items)
        added = total - per_item(bare, args.items)
        sync_added = sync_added or added
        print(f"| {shape} | {total:,.0f} | {added:,.0f} | {added / sync_added:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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
"""

from __future__ import annotations

import argparse
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


def instructions(name: str, items: int) -> int:
    """What the main thread of a child running ``name`` with ``items`` items executes. Only the
    main thread's: the sender's thread wakes on timers, and under valgrind, tens of times slower,
    it wakes more often the busier the machine is. The clock is ``clock_gettime`` (the TSC's
    calibration takes pairs of readings until two are close enough, which valgrind makes rare),
    and the hashes of strings are the same in every run (PYTHONHASHSEED)."""
    with tempfile.TemporaryDirectory() as out:
        command = ["valgrind", "--tool=callgrind", "--separate-threads=yes"]
        command += [f"--callgrind-out-file={out}/callgrind.%p", sys.executable, "-m"]
        command += ["benchmarks.instructions", "--child", name, str(items)]
        environment = {**os.environ, "INVOSEQ_CLOCK": "monotonic", "PYTHONHASHSEED": "0"}
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=900, check=False, env=environment
        )
        main_thread = sorted(Path(out).glob("callgrind.*-01"))
        found = TOTALS.search(main_thread[0].read_text()) if main_thread else None
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind gave no count for {name}: {done.stderr[-2000:]}")
    return int(found.group(1))


def per_item(name: str, items: int) -> float:
    return (instructions(name, 2 * items) - instructions(name, items)) / items


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__)
    parser.add_argument("--items", type=int, default=20_000, help="items a chunk (default 20,000)")
    parser.add_argument("--child", nargs=2, metavar=("CHUNK", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("benchmarks.instructions: valgrind is not installed", file=sys.stderr)
        return 2
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

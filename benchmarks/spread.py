"""Spreading over repository nodes, measured: events per second from traced processes into one
`cmr serve` node or two (on separate SQLite files, or sharing one), nothing dropped.

``python -m benchmarks.spread [--calls N] [--rounds R]`` prints a Markdown table (docs/scaling.md
shows a run). Each traced process connects to every node and warms up, then, on the same signal
as the others, records ``--calls`` traced calls (2 events each) and flushes until everything is
acknowledged; the rate is all processes' events over the time from the signal to the last
acknowledgement, the median of ``--rounds``. Not one of ``python -m benchmarks``'s cases: it
starts several servers and processes and takes a minute or two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from cmr.defaults import READY_PREFIX as READY

WORKER = """
import json, sys, time
import tracer

@tracer.traced
def leaf(x):
    return x + 1

@tracer.traced
def burst(calls):
    for i in range(calls):
        leaf(i)

calls, rounds = int(sys.argv[1]), int(sys.argv[2])
tracer.configure(sample_interval_ms=0, flush_timeout_ms=120_000)
while min(tracer.stats().acked_by_endpoint.values(), default=0) == 0:  # every node connected
    burst(100)
    assert tracer.flush()
for _ in range(rounds):
    print("ready", flush=True)
    sys.stdin.readline()
    burst(calls)
    assert tracer.flush(), tracer.stats()
    print("done", flush=True)
stats = tracer.stats()
assert stats.dropped_events == 0, stats
print(json.dumps(stats.acked_by_endpoint), flush=True)
"""


@contextmanager
def node(db: str, socket: Path) -> Iterator[str]:
    """A `cmr serve` on the ipc ``socket`` storing into ``db``; yields its endpoint."""
    command = [sys.executable, "-m", "cmr", "serve", "--bind", f"ipc://{socket}", "--db", db]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith(READY):
            raise RuntimeError(f"cmr serve did not start: {line!r}")
        yield line[len(READY) :].strip()
    finally:
        process.terminate()
        process.wait(60)


def measure(endpoints: list[str], processes: int, calls: int, rounds: int, work: Path) -> float:
    """Median events/s of ``processes`` traced processes bursting together into ``endpoints``."""
    script = work / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_ENDPOINT=",".join(endpoints), INVOSEQ_SPOOL_DIR=str(work / "spool"))
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), str(calls), str(rounds)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    rates = []
    try:
        for _ in range(rounds):
            for worker in workers:
                expect(worker, "ready")
            started = time.perf_counter()
            for worker in workers:
                assert worker.stdin is not None
                worker.stdin.write("go\n")
                worker.stdin.flush()
            for worker in workers:
                expect(worker, "done")
            rates.append(processes * (2 * calls + 2) / (time.perf_counter() - started))
        for worker in workers:
            assert worker.stdout is not None
            spread = json.loads(worker.stdout.readline())
            assert len(endpoints) == 1 or min(spread.values()) > 0, spread
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait(60)
    return statistics.median(rates)


def expect(worker: subprocess.Popen[str], word: str) -> None:
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if line != f"{word}\n":
        raise RuntimeError(f"a traced worker said {line!r}, not {word!r}")


SCENARIOS = (
    # (processes, databases: one entry per node; the same name twice shares the file; "pg": the
    # PostgreSQL URL given with --postgres)
    (1, ("a",)),
    (1, ("a", "b")),
    (1, ("shared", "shared")),
    (3, ("a",)),
    (3, ("shared", "shared")),
    (1, ("pg",)),
    (3, ("pg",)),
    (3, ("pg", "pg")),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spread", description=__doc__)
    parser.add_argument("--calls", type=int, default=200_000, help="traced calls per burst")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per scenario")
    parser.add_argument(
        "--postgres", metavar="URL", help="also measure nodes on this (scratch) PostgreSQL database"
    )
    args = parser.parse_args(argv)
    print("| traced processes | nodes | database | events/s (median) |")
    print("|---|---|---|---|")
    for processes, names in SCENARIOS:
        if "pg" in names and not args.postgres:
            continue
        with tempfile.TemporaryDirectory(prefix="invoseq-spread-") as tmp, ExitStack() as stack:
            work = Path(tmp)
            endpoints = [
                stack.enter_context(node(database(name, work, args.postgres), work / f"{i}.sock"))
                for i, name in enumerate(names)
            ]
            rate = measure(endpoints, processes, args.calls, args.rounds, work)
        print(f"| {processes} | {len(names)} | {describe(names)} | {rate:,.0f} |", flush=True)
    return 0


def database(name: str, work: Path, postgres: str | None) -> str:
    return postgres if name == "pg" and postgres else str(work / f"{name}.sqlite")


def describe(names: tuple[str, ...]) -> str:
    kind = "PostgreSQL" if "pg" in names else "SQLite"
    if len(names) == 1:
        return f"{kind}"
    return f"{kind}, one shared" if len(set(names)) == 1 else f"{kind}, one each"


if __name__ == "__main__":
    sys.exit(main())

"""Where a traced web service's CPU goes, thread by thread (issue 33 goal 2's profile).

``python -m benchmarks.request_threads [--kind fastapi|flask] [--work N] [--chunks N]
[--requests N]`` starts case ``requests``' service three times, bare, under ``tracer run`` and
under ``tracer run`` with the sampler off (``INVOSEQ_SAMPLE_INTERVAL_MS=0``), sends each the
same chunks of ``/calls/10`` requests in turn (the order reversed every other chunk), and prints
each thread's CPU a request (``/proc/PID/task/TID/schedstat``), median and lowest chunk. The
threads of a traced process: the program's main thread (the event loop or the sync worker),
the tracer's sender and sampler (``python``: they are not named at the OS level), ZeroMQ's I/O
thread. ``--work`` is the views' loop (case ``requests``' 20,000, about a millisecond; 0: the
request path alone).

Example: ``python -m benchmarks.request_threads --work 0 --chunks 8 --requests 1500``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path

from benchmarks.load import load
from benchmarks.processes import process_tree
from benchmarks.requests import WORK, serving, write_apps

VARIANTS: list[tuple[str, bool, dict[str, str]]] = [
    ("bare", False, {}),
    ("traced", True, {}),
    ("traced, sampler off", True, {"INVOSEQ_SAMPLE_INTERVAL_MS": "0"}),
]


def thread_cpu(pid: int) -> dict[str, tuple[str, int]]:
    """Each thread of ``pid``: its name (``comm``) and CPU time so far in ns."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except OSError:  # it ended meanwhile
            continue
        found[tid] = ("main" if tid == str(pid) else name, ns)
    return found


def measure(kind: str, work: int, chunks: int, requests: int) -> None:
    with tempfile.TemporaryDirectory() as directory, ExitStack() as stack:
        workdir = Path(directory)
        write_apps(workdir, work)
        servers = {
            name: stack.enter_context(serving(kind, traced, workdir, **env))
            for name, traced, env in VARIANTS
        }
        rates: dict[str, list[float]] = {name: [] for name in servers}
        figures: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        for port, _ in servers.values():
            load(port, "/calls/10", 200)  # warm
        for chunk in range(chunks):
            for name, _, _ in VARIANTS if chunk % 2 == 0 else VARIANTS[::-1]:
                port, pid = servers[name]
                pids = process_tree(pid)[0]  # the repository's process left out
                before = {p: thread_cpu(p) for p in pids}
                took = load(port, "/calls/10", requests)
                rates[name].append(requests / took)
                per_thread: dict[str, float] = {}
                for p in pids:
                    for tid, (thread, ns) in thread_cpu(p).items():
                        if tid in before[p]:
                            spent = (ns - before[p][tid][1]) / 1000 / requests
                            per_thread[thread] = per_thread.get(thread, 0.0) + spent
                per_thread["all threads"] = sum(per_thread.values())
                for thread, spent in per_thread.items():
                    figures[name].setdefault(thread, []).append(spent)
        for name, threads in figures.items():
            print(f"{name}: {statistics.median(rates[name]):.0f} requests/s (median)")
            for thread, values in sorted(threads.items()):
                if statistics.median(values) >= 0.5:
                    print(
                        f"  {thread:<14} {statistics.median(values):8.1f} µs a request "
                        f"(lowest chunk {min(values):.1f})"
                    )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.request_threads", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kind", choices=("fastapi", "flask"), default="fastapi")
    parser.add_argument("--work", type=int, default=WORK, help="the views' loop (default 20000)")
    parser.add_argument("--chunks", type=int, default=6)
    parser.add_argument("--requests", type=int, default=1000, help="requests a chunk")
    args = parser.parse_args()
    measure(args.kind, args.work, args.chunks, args.requests)


if __name__ == "__main__":
    main()

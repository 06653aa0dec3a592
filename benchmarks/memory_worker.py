"""Case 5's subprocess: a traced service emitting requests while no repository listens.

Every request is a sequence of 11 calls (a root and 10 children). The tracer is configured with a
small memory queue and a capped spool, and the endpoint has nobody behind it. Every 100 ms the
worker records its RSS and the tracer's counters; it stops after ``duration_s``, or early if its
RSS passes ``rss_limit_mib`` (a safety stop, reported). ``pace`` (events/s, 0: as fast as it can)
throttles the requests to a service's rate rather than a tight loop's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec

import tracer
from benchmarks.processes import report_result, worker_params
from tracer import traced, wire

EVENTS_PER_REQUEST = 22
PAGE = os.sysconf("SC_PAGE_SIZE")


@traced
def child(x: int) -> int:
    return x + 1


@traced
def request(n: int) -> None:
    for i in range(10):
        child(i)


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def spool_mib(directory: Path) -> float:
    if not directory.is_dir():
        return 0.0
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) / 2**20


def full_batch_bytes(batch_events: int) -> int:
    """The encoded size of a batch of ``batch_events`` events of this workload (what one queued
    batch holds in memory)."""
    seq = os.urandom(16)
    now = time.perf_counter_ns()
    events: list[tuple[Any, ...]] = []
    for iid in range(10**9, 10**9 + batch_events // 2):
        events.append((wire.TAG_START, iid, iid - 1, 0, 2, now, seq))
        events.append((wire.TAG_END, iid, now + 1000))
    process = (os.getpid(), "host", "platform", now, now, ["benchmark"], 1000)
    return len(msgspec.msgpack.encode((2**62, 10**6, process, [], [], [(1, events)], 0)))


def main() -> None:
    params = worker_params()
    workdir = Path(params["workdir"])
    spool = workdir / "spool"
    tracer.configure(
        endpoint=f"ipc://{workdir}/nobody-listens.sock",
        spool_dir=str(spool),
        spool_bytes=params["spool_bytes"],
        queue_batches=params["queue_batches"],
        batch_events=params["batch_events"],
        sample_interval_ms=0,
        flush_timeout_ms=200,
    )
    request(0)  # the thread registers and the sender starts before the baseline
    start_rss = rss_mib()
    samples: list[dict[str, float]] = []
    pace, duration, limit = params["pace"], params["duration_s"], params["rss_limit_mib"]
    started = time.monotonic()
    next_sample = started
    requests = 0
    aborted = False
    while (now := time.monotonic()) - started < duration:
        if now >= next_sample:
            stats = tracer.stats()
            rss = rss_mib()
            samples.append(
                {
                    "t": now - started,
                    "rss_growth_mib": rss - start_rss,
                    "buffered": stats.buffered_events,
                    "dropped": stats.dropped_events,
                    "spooled_batches": stats.spooled_batches,
                    "spool_mib": spool_mib(spool),
                }
            )
            next_sample = now + 0.1
            if rss - start_rss > limit:
                aborted = True
                break
        for _ in range(100):
            request(requests)
        requests += 100
        if pace:
            ahead = requests * EVENTS_PER_REQUEST / pace - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # throttles the workload to its rate (not a synchronisation)
    elapsed = time.monotonic() - started
    stats = tracer.stats()
    tracer.shutdown(1)
    report_result(
        {
            "samples": samples,
            "events": requests * EVENTS_PER_REQUEST,
            "elapsed_s": elapsed,
            "aborted": aborted,
            "dropped": stats.dropped_events,
            "spooled_batches": stats.spooled_batches,
            "batch_bytes": full_batch_bytes(params["batch_events"]),
        }
    )


if __name__ == "__main__":
    main()

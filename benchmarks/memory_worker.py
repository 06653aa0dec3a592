"""Case 5's subprocess: a traced service emitting requests while no repository listens.

Every request is a sequence of 11 calls (a root and 10 children). The tracer runs with its default
memory bound (``max_buffered_bytes``) and queue, a capped spool, and an endpoint with nobody
behind it. The requests come from the main thread, or from ``threads`` threads at once. Every
100 ms the main thread records the process's RSS and the tracer's counters; the run stops after
``duration_s``, or early if RSS grows past ``rss_limit_mib`` (a safety stop, reported). ``pace``
(events/s, 0: as fast as it can; main thread only) throttles the requests to a service's rate.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tracer
from benchmarks.processes import report_result, worker_params
from tracer._core import budget, decorator

EVENTS_PER_REQUEST = 22
PAGE = os.sysconf("SC_PAGE_SIZE")


@tracer.traced
def child(x: int) -> int:
    return x + 1


@tracer.traced
def request(n: int) -> None:
    for i in range(10):
        child(i)


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def peak_rss_mib() -> float:
    """The most RSS the process has had (since ``reset_peak``): nothing between samples hides."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return rss_mib()


def reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current RSS (Linux 4.0+)
    except OSError:
        pass  # the peak then starts at the process's start: an overestimate, never an under


def spool_mib(directory: Path) -> float:
    if not directory.is_dir():
        return 0.0
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) / 2**20


class Sampler:
    """RSS and the tracer's counters, every 100 ms, from the main thread."""

    def __init__(self, spool: Path, limit_mib: float) -> None:
        self.spool = spool
        self.limit_mib = limit_mib
        self.samples: list[dict[str, float]] = []
        self.aborted = False
        reset_peak()
        self.start_rss = rss_mib()
        self.started = time.monotonic()
        self.next = self.started

    def due(self) -> bool:
        return time.monotonic() >= self.next

    def take(self) -> None:
        now = time.monotonic()
        stats = tracer.stats()
        growth = rss_mib() - self.start_rss
        self.samples.append(
            {
                "t": now - self.started,
                "rss_growth_mib": growth,
                "peak_growth_mib": peak_rss_mib() - self.start_rss,
                "buffered": stats.buffered_events,
                "counted_mib": budget.in_use() / 2**20,
                "dropped": stats.dropped_events,
                "spooled_batches": stats.spooled_batches,
                "spool_mib": spool_mib(self.spool),
            }
        )
        self.next = now + 0.1
        self.aborted = growth > self.limit_mib


def run_main_thread(sampler: Sampler, duration: float, pace: int) -> int:
    """Requests from the main thread, sampling between rounds of 100; the requests made."""
    requests = 0
    while time.monotonic() - sampler.started < duration and not sampler.aborted:
        if sampler.due():
            sampler.take()
        for _ in range(100):
            request(requests)
        requests += 100
        if pace:
            ahead = requests * EVENTS_PER_REQUEST / pace - (time.monotonic() - sampler.started)
            if ahead > 0:
                time.sleep(ahead)  # throttles the workload to its rate (not a synchronisation)
    return requests


def run_threads(count: int, make_sampler: Callable[[], Sampler], duration: float) -> int:
    """Requests from ``count`` threads; the main thread samples. Each thread has recorded a
    request (registered, its buffer made) before the baseline is read."""
    ready = threading.Barrier(count + 1, timeout=60)
    stop = threading.Event()
    made = [0] * count

    def work(index: int) -> None:
        request(0)
        ready.wait()
        while not stop.is_set():
            for _ in range(100):
                request(made[index])
            made[index] += 100

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    ready.wait()
    sampler = make_sampler()
    try:
        while time.monotonic() - sampler.started < duration and not sampler.aborted:
            sampler.take()
            time.sleep(max(0.0, sampler.next - time.monotonic()))  # the sampling period
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    return sum(made)


def main() -> None:
    params = worker_params()
    workdir = Path(params["workdir"])
    spool = workdir / "spool"
    config = tracer.configure(
        endpoint=f"ipc://{workdir}/nobody-listens.sock",
        spool_dir=str(spool),
        spool_bytes=params["spool_bytes"],
        sample_interval_ms=0,
        flush_timeout_ms=200,
    )
    request(0)  # the main thread registers and the sender starts before the baseline
    duration, limit, threads = params["duration_s"], params["rss_limit_mib"], params["threads"]
    holder: list[Sampler] = []

    def make_sampler() -> Sampler:
        holder.append(Sampler(spool, limit))
        return holder[0]

    if threads:
        requests = run_threads(threads, make_sampler, duration)
    else:
        requests = run_main_thread(make_sampler(), duration, params["pace"])
    sampler = holder[0]
    sampler.take()  # the last sample: the peak over the whole run
    elapsed = time.monotonic() - sampler.started
    stats = tracer.stats()
    tracer.shutdown(1)
    report_result(
        {
            "samples": sampler.samples,
            "events": requests * EVENTS_PER_REQUEST,
            "elapsed_s": elapsed,
            "aborted": sampler.aborted,
            "dropped": stats.dropped_events,
            "spooled_batches": stats.spooled_batches,
            "bound_mib": config.max_buffered_bytes / 2**20,
            "implementation": decorator.IMPLEMENTATION,
        }
    )


if __name__ == "__main__":
    main()

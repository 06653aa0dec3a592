"""Case 2's subprocess: one traced process bursting events into a repository in another process.

A chunk records a burst of traced calls (2 events each) and ends when the repository has
acknowledged every event (``tracer.flush``): events / that time is the rate at which one process
gets its events durably into the repository. The repository is a real ``cmr serve`` (``python -m
cmr.server``) over ipc, into SQLite (the default; one process, or ``--workers 2``) or memory,
restarted for every chunk so
that no chunk inherits a bigger database. The baseline is ``benchmarks.raw_sink``: the same number
of events, encoded in batches of 256 and decoded on the other side, nothing stored.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import zmq

import tracer
from benchmarks.harness import interleave
from benchmarks.processes import report_result, start_reporting, stop, worker_params
from cmr.defaults import READY_PREFIX as READY
from invoseq import wire
from tracer import traced


@traced
def leaf(x: int) -> int:
    return x + 1


@traced
def burst(calls: int) -> None:
    call = leaf
    for i in range(calls):
        call(i)


def raw_batches(events: int, size: int = 256) -> list[tuple[Any, ...]]:
    """Batches of ``size`` Start/End tuples laid out as the sender's, ready to encode."""
    seq = os.urandom(16)
    process = (os.getpid(), "host", "platform", 0, 0, ["raw"], 0)
    flat: list[tuple[Any, ...]] = []
    for iid in range(1, events // 2 + 1):
        flat.append((wire.TAG_START, iid, 0, 0, 1, iid * 1000, seq))
        flat.append((wire.TAG_END, iid, iid * 1000 + 500))
    return [
        (1, n + 1, process, [], [], [(1, flat[start : start + size])])
        for n, start in enumerate(range(0, len(flat), size))
    ]


class Chunks:
    """The three variants; each chunk starts its own server and returns events per second."""

    def __init__(self, calls: int, workdir: Path) -> None:
        self.calls = calls
        self.events = 2 * calls + 2  # the burst's root adds a Start and an End
        self.workdir = workdir
        self.count = 0
        self.generation: list[float] = []  # events/s recorded, the loop alone
        self.totals = {"sent_events": 0, "dropped_events": 0, "spooled_batches": 0}
        self.dropped_by: dict[str, int] = {}  # variant -> events the tracer dropped
        self.batches = raw_batches(self.events)

    def _endpoint(self) -> str:
        self.count += 1
        return f"ipc://{self.workdir}/tp-{self.count}.sock"

    def raw(self) -> float:
        endpoint = self._endpoint()
        sink, _ = start_reporting(
            [sys.executable, "-m", "benchmarks.raw_sink", endpoint, str(self.events)], "ready"
        )
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(endpoint)
            encode = msgspec.msgpack.Encoder().encode
            started = time.perf_counter()
            for batch in self.batches:
                sock.send_multipart((wire.BATCH_HEADER, encode(batch)))
            if not sock.poll(60_000, zmq.POLLIN) or sock.recv() != b"done":
                raise RuntimeError("the raw sink did not receive every event within 60 s")
            return self.events / (time.perf_counter() - started)
        finally:
            sock.close()
            context.term()
            stop(sink)

    def into(self, variant: str, *where: str) -> Callable[[], float]:
        def chunk() -> float:
            server, endpoint = start_reporting(
                [sys.executable, "-m", "cmr.server", "--bind", self._endpoint(), *where], READY
            )
            try:
                return self._burst(endpoint, variant)
            finally:
                tracer.shutdown(30)
                stop(server)
                for path in self.workdir.glob("tp-*.sqlite*"):
                    path.unlink()

        return chunk

    def _burst(self, endpoint: str, variant: str) -> float:
        tracer.configure(endpoint=endpoint, sample_interval_ms=0, flush_timeout_ms=120_000)
        started = time.perf_counter()
        burst(self.calls)
        recorded = time.perf_counter()
        acknowledged = tracer.flush(120)
        done = time.perf_counter()
        stats = tracer.stats()
        self.totals["sent_events"] += stats.sent_events
        self.totals["dropped_events"] += stats.dropped_events
        self.dropped_by[variant] = self.dropped_by.get(variant, 0) + stats.dropped_events
        self.totals["spooled_batches"] += stats.spooled_batches
        if not acknowledged or stats.sent_events + stats.dropped_events != self.events:
            raise RuntimeError(f"{stats.sent_events} of {self.events} events acknowledged: {stats}")
        # Events the tracer dropped (its buffer full while the repository fell behind) are
        # reported in their own row, whose target is none; the rate counts what arrived.
        self.generation.append(self.events / (recorded - started))
        return stats.sent_events / (done - started)


def main() -> None:
    params = worker_params()
    chunks = Chunks(params["calls"], Path(params["workdir"]))
    db = str(chunks.workdir / "tp-repository.sqlite")
    sqlite = chunks.into("sqlite", "--db", db)
    workers = chunks.into("workers", "--db", db, "--workers", "2")
    series = interleave(
        {
            "raw": chunks.raw,
            "sqlite": sqlite,
            "workers": workers,
            "memory": chunks.into("memory", "--memory"),
        },
        rounds=params["rounds"],
        min_rounds=params["min_rounds"],
        budget_s=params["budget_s"],
    )
    report_result(
        {
            "events_per_chunk": chunks.events,
            "series": series,
            "generation": chunks.generation,
            "totals": chunks.totals,
            "dropped_by": chunks.dropped_by,
        }
    )


if __name__ == "__main__":
    main()

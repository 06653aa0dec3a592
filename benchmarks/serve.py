"""Case 2c: ``cmr serve`` over a real socket, one worker against ``--workers 2``, events/s.

A DEALER client sends pre-encoded batches (the ingest case's busy-service traffic, in the
sender's batches of 4096 events) to a ``cmr serve`` subprocess on ipc, keeping at most
``WINDOW`` unacknowledged (as the sender does), until every batch is acknowledged; each chunk
is a fresh SQLite file. The rate is events over the time from the first send to the last
acknowledgement; ``--workers 2`` as a ratio to the single process measured in the same rounds.
On this two-core machine the client, the server's proxy and the workers share the cores, so
the ratio says how much of a second core the workers win, not what more cores would give.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import zmq

from benchmarks import synthetic
from benchmarks.harness import CaseResult, Row, Settings, interleave, median, median_error
from benchmarks.processes import clean_environment
from cmr.defaults import READY_PREFIX

NAME: Final = "serve"
#: Batches in flight, unacknowledged, at most: the sender's default window
#: (``tracer.config.Config.max_inflight_batches``; tests/test_benchmarks.py holds them equal).
WINDOW: Final = 64
#: The longest a chunk may take (the server is then stopped and the case fails).
CHUNK_TIMEOUT_S: Final = 120.0


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    events = 60_000 if settings.quick else 400_000
    traffic = synthetic.requests(puid=1, events=events)
    chunks = 0

    def served(workers: int) -> Callable[[], float]:
        def chunk() -> float:
            nonlocal chunks
            chunks += 1
            db = settings.workdir / f"serve-{chunks}.sqlite"
            try:
                return serve_chunk(settings.workdir, db, workers, traffic.frames, traffic.events)
            finally:
                for path in settings.workdir.glob(f"serve-{chunks}.sqlite*"):
                    path.unlink()

        return chunk

    series = interleave(
        {"one": served(1), "two": served(2)},
        rounds=2 if settings.quick else 5,
        min_rounds=1 if settings.quick else 3,
        budget_s=settings.budget_s,
    )
    result.raw = {"events_per_chunk": traffic.events, **series}
    one = median(series["one"])
    for variant, label in (("one", "1 process"), ("two", "--workers 2")):
        rate = median(series[variant])
        result.rows.append(
            Row(
                case=NAME,
                name=f"cmr serve {label}, batches over ipc into SQLite",
                value=rate,
                unit="events/s",
                baseline=one,
                baseline_name="cmr serve, 1 process",
                ratio=rate / one,
                error=median_error(series[variant]),
                note=f"{len(series[variant])} chunks of {traffic.events} events",
            )
        )
    return result


def serve_chunk(
    workdir: Path, db: Path | str, workers: int, frames: list[list[bytes]], events: int
) -> float:
    """Events/s of ``frames`` sent to a fresh ``cmr serve --db db`` (a file or a URL) until the
    last is acknowledged."""
    endpoint = f"ipc://{workdir}/serve.sock"
    options = ["--workers", str(workers), "--bind", endpoint, "--db", str(db)]
    process = subprocess.Popen(
        [sys.executable, "-m", "cmr", "serve", *options],
        stdout=subprocess.PIPE,
        env=clean_environment(),
        text=True,
    )
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith(READY_PREFIX):
            raise RuntimeError(f"cmr serve did not start: {line!r}")
        sock.connect(endpoint)
        deadline = time.monotonic() + CHUNK_TIMEOUT_S
        started = time.perf_counter()
        sent = acked = 0
        while acked < len(frames):
            while sent < len(frames) and sent - acked < WINDOW:
                sock.send_multipart(frames[sent])
                sent += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {acked} of {len(frames)} batches acknowledged")
            if sock.poll(1_000):
                sock.recv_multipart()
                acked += 1
        return events / (time.perf_counter() - started)
    finally:
        sock.close()
        context.term()
        process.terminate()
        process.wait(CHUNK_TIMEOUT_S)

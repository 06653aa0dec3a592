"""A/B runs of the ``sequences`` case's chunk, outside the harness: ``python -m benchmarks.chunks
--calls 10 --workers 2 --chunks 3`` sends 20,000 request-shaped sequences (``synthetic.
short_requests``) to a fresh ``cmr serve --workers N`` per chunk (``short_sequences.
served_rate``), or with ``--workers 0`` hands them to ``Ingest`` in this process, into a fresh
SQLite file each time, and prints each chunk's sequences a second and their median. Run it from
two checkouts in turn (``PYTHONPATH`` naming each) to compare them on a machine whose speed
drifts."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import synthetic
from benchmarks.short_sequences import served_rate, store_grouped
from cmr.server.ingest import Ingest
from cmr.store import open_store


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chunks", description=__doc__)
    parser.add_argument("--calls", type=int, default=10, help="calls a sequence (default 10)")
    parser.add_argument("--workers", type=int, default=2, help="cmr serve --workers; 0: in-process")
    parser.add_argument("--chunks", type=int, default=3, help="fresh files to fill (default 3)")
    parser.add_argument("--sequences", type=int, default=20_000, help="a chunk's sequences")
    args = parser.parse_args()
    if min(args.calls, args.chunks, args.sequences) < 1 or args.workers < 0:
        parser.error("--calls, --chunks and --sequences take 1 or more, --workers 0 or more")
    traffic = synthetic.short_requests(args.sequences, args.calls)
    rates = [_chunk(traffic, args.workers) for _ in range(args.chunks)]
    shown = " ".join(f"{rate / 1000:.1f}k" for rate in rates)
    print(
        f"{args.calls}-call, --workers {args.workers}: {shown} sequences/s, "
        f"median {statistics.median(rates) / 1000:.1f}k"
    )


def _chunk(traffic: synthetic.Encoded, workers: int) -> float:
    """Sequences a second of one chunk into a fresh file."""
    with tempfile.TemporaryDirectory(prefix="invoseq-chunks-") as scratch:
        db = Path(scratch) / "chunk.sqlite"
        if workers:
            return served_rate(Path(scratch), str(db), workers, traffic)
        store = open_store(str(db))
        try:
            started = time.perf_counter()
            store_grouped(Ingest(store), traffic.frames)
            return len(traffic.seqs) / (time.perf_counter() - started)
        finally:
            store.close()


if __name__ == "__main__":
    main()

"""Case 2d: request-shaped traffic, sequences per second: a web service's sequences, one per
request, each of one call or ten, hundreds to a batch.

The ingest and serve cases send a busy service's sequences of 111 calls, a few dozen to a batch:
there the repository's cost is per event. Here it is per sequence (issue 33, goal 6): the
traffic is ``synthetic.short_requests`` (four worker processes of one thread each, their
batches of 4,096 events interleaved), stored two ways into SQLite (a fresh file per chunk) and
PostgreSQL (a fresh schema per chunk):

- *pre-encoded*: ``Ingest.handle_many`` ``GROUP_BATCHES`` batches at a time, what ``cmr serve``
  does per group of messages minus the socket;
- *end to end*: a ``cmr serve`` subprocess on ipc, the batches sent by a DEALER keeping
  ``serve.WINDOW`` unacknowledged, timed from the first send to the last acknowledgement; and
  the same with ``cmr serve --workers 2`` (two processes decoding and storing, taking turns at
  the store: ``cmr.store.sqlite.turns``).

And at the issue's own count, ``ISSUE_COUNT`` sequences into one fresh ``cmr serve --workers 2``
(a chunk five times the others', so the WAL fills and SQLite checkpoints as a node's does), into
a SQLite file and, with a server, a PostgreSQL schema.

And ten-call sequences whose requests last as real ones do (``VARIED``: lognormal durations, so
entries land all over the duration index, and a longer request more often spans two batches)
into ``cmr serve --workers 2`` on each store: the other chunks give every request one duration.

And once more where a node spends its life: one-call sequences of varied durations sent to
``cmr serve --workers 2`` into a SQLite file already holding ``GROWN`` of them (copied from one
filled before the rounds), since a repository's B-trees grow with it and ingest slows as they do.

Baseline: the typed decode alone of the same batches (each shape its own), in the same rounds.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from benchmarks import postgres, synthetic
from benchmarks.harness import (
    CaseResult,
    Row,
    Settings,
    Target,
    interleave,
    median,
    median_error,
    spread,
)
from benchmarks.postgres import scratch_schema
from benchmarks.serve import serve_chunk
from cmr.server.groups import GROUP_BATCHES
from cmr.server.ingest import Ingest
from cmr.store import open_store
from invoseq import wire

NAME: Final = "sequences"
#: Issue 33, goal 6: sequences per second per node.
SQLITE_TARGETS: Final = (Target("issue 33", ">=", 100_000),)
POSTGRES_TARGETS: Final = (Target("issue 33", ">=", 50_000),)
#: Calls per sequence: a request that makes one traced call, and one that makes ten.
SHAPES: Final = (1, 10)
#: How each store takes the traffic: 0, pre-encoded batches handed to ``Ingest`` in this
#: process; N, sent to ``cmr serve --workers N``.
WAYS: Final = (0, 1, 2)
#: The one-call sequences the grown repository holds (``--quick``: a fiftieth), stored in
#: parts of ``GROWN_PART``.
GROWN: Final = 1_000_000
GROWN_PART: Final = 100_000
#: The issue's own count of sequences into one ``cmr serve`` (``--quick``: a tenth).
ISSUE_COUNT: Final = 100_000


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    sequences = 2_000 if settings.quick else 20_000
    traffic = {calls: synthetic.short_requests(sequences, calls) for calls in SHAPES}
    decoder = msgspec.msgpack.Decoder(wire.Batch)
    chunks = 0
    server = postgres.server()

    def into(store: str, calls: int, workers: int) -> Callable[[], float]:
        """A chunk of ``calls``-call sequences into a fresh repository of ``store``."""
        encoded = traffic[calls]

        def chunk() -> float:
            nonlocal chunks
            chunks += 1
            if store == "postgres":
                assert server is not None
                with scratch_schema(server) as url:
                    open_store(url).close()  # the schema made before timing starts
                    return measure(url)
            path = settings.workdir / f"sequences-{chunks}.sqlite"
            try:
                return measure(str(path))
            finally:
                for leftover in settings.workdir.glob(f"sequences-{chunks}.sqlite*"):
                    leftover.unlink()

        def measure(db: str) -> float:
            if workers:
                return served_rate(settings.workdir, db, workers, encoded)
            repository = open_store(db)
            try:
                ingest = Ingest(repository)
                frames = encoded.frames
                started = time.perf_counter()
                store_grouped(ingest, frames)
                elapsed = time.perf_counter() - started
                if repository.stats().events != encoded.events:
                    raise RuntimeError("the repository did not store every event")
                return len(encoded.seqs) / elapsed
            finally:
                repository.close()

        return chunk

    grown = GROWN // 50 if settings.quick else GROWN
    issue_count = ISSUE_COUNT // 10 if settings.quick else ISSUE_COUNT
    template, grown_end_ns = _grown_file(settings.workdir / "grown.sqlite", grown)
    stores = ["sqlite", *(["postgres"] if server else [])]
    if not server:
        result.notes.append(f"PostgreSQL variants skipped: {postgres.PG_ENV} is not set")
    variants: dict[str, Callable[[], float]] = (
        {f"decode-{calls}": _decode_only(decoder, traffic[calls]) for calls in SHAPES}
        | {GROWN_KEY: _into_grown(settings.workdir, template, grown_end_ns, sequences)}
        | _at_issue_count(settings.workdir, server, issue_count)
        | _varied(settings.workdir, server, sequences)
    )
    for store in stores:
        for workers in WAYS:
            for calls in SHAPES:
                variants[_key(store, calls, workers)] = into(store, calls, workers)
    series = interleave(
        variants,
        rounds=2 if settings.quick else 6,
        min_rounds=1 if settings.quick else 3,
        budget_s=settings.budget_s,
        warmup=not settings.quick,
    )
    template.unlink()
    result.raw = {"sequences_per_chunk": sequences, "grown_holds": grown, **series}
    for calls in SHAPES:
        result.noise[f"decode-{calls}"] = spread(series[f"decode-{calls}"])
    result.rows += [
        _row(
            store,
            calls,
            workers,
            series,
            f"{sequences} sequences ({len(traffic[calls].frames)} batches)",
        )
        for store in stores
        for workers in WAYS
        for calls in SHAPES
    ]
    result.rows += [
        _grown_row(series, grown, sequences),
        *(_varied_row(store, series, sequences) for store in stores),
        *(_issue_row(store, calls, series, issue_count) for store in stores for calls in SHAPES),
    ]
    return result


def _issue_key(store: str, calls: int) -> str:
    return f"{store}-{calls}-served-2-issue"


def _at_issue_count(
    workdir: Path, server: str | None, sequences: int
) -> dict[str, Callable[[], float]]:
    """The variants at the issue's count: ``sequences`` of each shape into a fresh ``cmr serve
    --workers 2`` on a SQLite file and, with a ``server``, on a PostgreSQL schema."""
    return {
        _issue_key(store, calls): chunk
        for calls in SHAPES
        for store, chunk in _served_by_store(
            workdir, server, f"issue-{calls}", synthetic.short_requests(sequences, calls)
        ).items()
    }


def _issue_row(store: str, calls: int, series: dict[str, list[float]], sequences: int) -> Row:
    """The row of ``calls``-call sequences into ``store`` at the issue's count."""
    fresh = "file" if store == "sqlite" else "schema"
    return _rate_row(
        series,
        _issue_key(store, calls),
        calls,
        store,
        name=f"{_calls(calls)} sequences into {_LABELS[store]}, {sequences:,} a chunk, "
        "cmr serve --workers 2",
        chunk=f"{sequences} sequences, each into a fresh {fresh}",
    )


def served_rate(workdir: Path, db: str, workers: int, traffic: synthetic.Encoded) -> float:
    """Sequences a second of ``traffic`` sent to a fresh ``cmr serve --workers`` on ``db``."""
    rate = serve_chunk(workdir, db, workers, traffic.frames, traffic.events)
    return rate * len(traffic.seqs) / traffic.events


def _served_chunks(
    workdir: Path, name: str, traffic: synthetic.Encoded, template: Path | None = None
) -> Callable[[], float]:
    """Chunks of ``traffic`` sent to a fresh ``cmr serve --workers 2`` on a SQLite file of their
    own, ``<name>-<n>.sqlite`` (a copy of ``template``, or a new file), removed after."""
    copies = 0

    def chunk() -> float:
        nonlocal copies
        copies += 1
        path = workdir / f"{name}-{copies}.sqlite"
        if template is not None:
            shutil.copyfile(template, path)
        try:
            return served_rate(workdir, str(path), 2, traffic)
        finally:
            for leftover in workdir.glob(f"{name}-{copies}.sqlite*"):
                leftover.unlink()

    return chunk


#: The calls of the sequences of varied durations.
VARIED: Final = 10


def _varied(workdir: Path, server: str | None, sequences: int) -> dict[str, Callable[[], float]]:
    """The variants of ``sequences`` ``VARIED``-call sequences of lognormal durations into a
    fresh ``cmr serve --workers 2`` on a SQLite file and, with a ``server``, a PostgreSQL
    schema."""
    traffic = synthetic.short_requests(sequences, VARIED, durations=random.Random(1))
    served = _served_by_store(workdir, server, "varied", traffic)
    return {_varied_key(store): chunk for store, chunk in served.items()}


def _varied_key(store: str) -> str:
    return f"{store}-{VARIED}-served-2-varied"


def _varied_row(store: str, series: dict[str, list[float]], sequences: int) -> Row:
    """The row of the sequences of varied durations into ``store``."""
    return _rate_row(
        series,
        _varied_key(store),
        VARIED,
        store,
        name=f"{_calls(VARIED)} sequences of varied durations into {_LABELS[store]}, "
        "cmr serve --workers 2",
        chunk=f"{sequences} sequences of lognormal durations",
    )


def _served_by_store(
    workdir: Path, server: str | None, name: str, traffic: synthetic.Encoded
) -> dict[str, Callable[[], float]]:
    """Chunks of ``traffic`` into a fresh ``cmr serve --workers 2`` by store: on a SQLite file
    (``_served_chunks``, files named after ``name``) and, with a ``server``, a PostgreSQL schema
    (``_served_schemas``)."""
    served = {"sqlite": _served_chunks(workdir, name, traffic)}
    if server:
        served["postgres"] = _served_schemas(workdir, server, traffic)
    return served


def _served_schemas(workdir: Path, server: str, traffic: synthetic.Encoded) -> Callable[[], float]:
    """Chunks of ``traffic`` sent to a fresh ``cmr serve --workers 2`` on a PostgreSQL schema of
    their own (made before the timing starts, dropped after)."""

    def chunk() -> float:
        with scratch_schema(server) as url:
            open_store(url).close()
            return served_rate(workdir, url, 2, traffic)

    return chunk


#: The grown repository's variant in the raw results.
GROWN_KEY: Final = "sqlite-1-served-2-grown"


def _decode_only(
    decoder: msgspec.msgpack.Decoder[wire.Batch], encoded: synthetic.Encoded
) -> Callable[[], float]:
    """Sequences a second of the typed decode alone of ``encoded``."""

    def chunk() -> float:
        started = time.perf_counter()
        for _, body in encoded.frames:
            decoder.decode(body)
        return len(encoded.seqs) / (time.perf_counter() - started)

    return chunk


def _into_grown(
    workdir: Path, template: Path, after_ns: int, sequences: int
) -> Callable[[], float]:
    """Chunks of ``sequences`` one-call sequences of varied durations sent to ``cmr serve
    --workers 2`` into a copy of the grown repository ``template``, starting after its own
    (``after_ns``)."""
    varied = synthetic.short_requests(
        sequences, 1, first_puid=1_000_000, durations=random.Random(1), first_ns=after_ns
    )
    return _served_chunks(workdir, "grown", varied, template)


def _grown_row(series: dict[str, list[float]], grown: int, sequences: int) -> Row:
    return _rate_row(
        series,
        GROWN_KEY,
        1,
        "sqlite",
        name=f"one-call sequences into SQLite holding {grown:,}, cmr serve --workers 2",
        chunk=f"{sequences} sequences of varied durations",
    )


def store_grouped(ingest: Ingest, frames: list[list[bytes]]) -> None:
    """``frames`` handed to ``ingest`` ``GROUP_BATCHES`` at a time, as ``cmr serve`` takes what
    waits on its socket."""
    for at in range(0, len(frames), GROUP_BATCHES):
        if None in ingest.handle_many(frames[at : at + GROUP_BATCHES]):
            raise RuntimeError("the repository rejected a synthetic batch")


def _grown_file(path: Path, sequences: int) -> tuple[Path, int]:
    """A SQLite repository holding ``sequences`` one-call sequences of varied durations from
    four processes, stored ``GROWN_PART`` at a time as ``cmr serve`` stores them (groups of
    ``GROUP_BATCHES``), each part's traffic after the last's; and the time its last ends."""
    durations = random.Random(0)
    repository = open_store(str(path))
    end_ns = 0
    try:
        ingest = Ingest(repository)
        for part, first in enumerate(range(0, sequences, GROWN_PART)):
            count = min(GROWN_PART, sequences - first)
            traffic = synthetic.short_requests(
                count, 1, first_puid=1 + 4 * part, durations=durations, first_ns=end_ns
            )
            store_grouped(ingest, traffic.frames)
            end_ns = traffic.end_ns + synthetic.STEP_NS
    finally:
        repository.close()
    return path, end_ns


def _row(store: str, calls: int, workers: int, series: dict[str, list[float]], size: str) -> Row:
    """The row of one variant against the decode of its shape."""
    how = {0: "pre-encoded batches, grouped", 1: "cmr serve over ipc"}.get(
        workers, f"cmr serve --workers {workers} over ipc"
    )
    return _rate_row(
        series,
        _key(store, calls, workers),
        calls,
        store,
        name=f"{_calls(calls)} sequences into {_LABELS[store]}, {how}",
        chunk=size,
    )


def _rate_row(
    series: dict[str, list[float]],
    key: str,
    calls: int,
    store: str,
    *,
    name: str,
    chunk: str,
) -> Row:
    """The row of variant ``key``: the median of its chunks' sequences a second against the
    typed decode of its shape (``calls``), each chunk being ``chunk``, judged by ``store``'s
    targets."""
    values, decode = series[key], median(series[f"decode-{calls}"])
    rate = median(values)
    return Row(
        case=NAME,
        name=name,
        value=rate,
        unit="sequences/s",
        baseline=decode,
        baseline_name="typed decode alone",
        ratio=rate / decode,
        targets=SQLITE_TARGETS if store == "sqlite" else POSTGRES_TARGETS,
        error=median_error(values),
        note=f"{len(values)} chunks of {chunk}",
    )


#: Each store as a row names it.
_LABELS: Final = {"sqlite": "SQLite", "postgres": "PostgreSQL (one node)"}


def _key(store: str, calls: int, workers: int) -> str:
    """The variant's key in the raw results (``-served``: one ``cmr serve`` process, as before
    there were workers)."""
    served = {0: "", 1: "-served"}.get(workers, f"-served-{workers}")
    return f"{store}-{calls}{served}"


def _calls(calls: int) -> str:
    return "one-call" if calls == 1 else f"{calls}-call"

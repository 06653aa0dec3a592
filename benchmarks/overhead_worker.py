"""Case 1's subprocess: the cost of one traced call, measured inside a fresh traced process.

Run by ``benchmarks.overhead`` as ``python -m benchmarks.overhead_worker '<JSON>'`` (with
``INVOSEQ_PURE=1`` for the pure-Python path when the C accelerator is built), so each
implementation starts from a clean interpreter.

Costs are CPU time of the whole process (every thread: the caller, the sender, ZeroMQ's I/O
thread) per call, which the other work on a shared machine disturbs far less than wall time.
Two phases, each interleaving its variants chunk by chunk:

- **recording**: the tracer records into memory and its sender sleeps through the chunk (flush
  interval of an hour); the chunk's events are flushed and discarded after it, untimed. This is
  the hot path alone.
- **sender**: the tracer sends at its default flush interval to a real ``cmr serve``
  (``python -m cmr.server --memory``) in another process, and the timed region runs until the
  repository has acknowledged the chunk's last event: the hot path plus everything the sender
  does for it (drain, encode, send, acknowledgements), as with ``tracer run``, whose repository
  is a subprocess. The ``embedded`` variant sends to a ``cmr.server.server.ServerThread`` (SQLite)
  in this process instead, so the repository's ingest is paid by the traced process too.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import tracer
from benchmarks.harness import interleave
from benchmarks.processes import report_result, start_reporting, stop, worker_params
from cmr.defaults import READY_PREFIX
from tracer import traced
from tracer.testing import capture

# -- the measured functions: the same shapes, bare and traced --------------------------------


# Each traced function is a twin of its bare one, not ``traced(bare)``: tracing instruments a
# function's code in place (the function stays the same object), so the bare one must be another.
def f(x: int) -> int:
    return x + 1


@traced
def traced_f(x: int) -> int:
    return x + 1


def loop_bare(n: int) -> None:
    call = f
    for i in range(n):
        call(i)


def loop_traced(n: int) -> None:
    call = traced_f
    for i in range(n):
        call(i)


@traced
def flat_root(n: int) -> None:
    """Every call of ``traced_f`` nests under this one invocation."""
    loop_traced(n)


def bare_mid(x: int) -> None:
    for i in range(10):
        f(i)


def bare_top(x: int) -> None:
    for i in range(10):
        bare_mid(i)


@traced
def traced_mid(x: int) -> None:
    for i in range(10):
        traced_f(i)


@traced
def traced_top(x: int) -> None:
    for i in range(10):
        traced_mid(i)


TREE_CALLS = 111  # 1 root, 10 children, 100 leaves


async def coroutine_f(x: int) -> int:
    return x + 1


@traced
async def traced_coroutine_f(x: int) -> int:
    return x + 1


def generator_f(x: int) -> Iterator[int]:
    yield x + 1


@traced
def traced_generator_f(x: int) -> Iterator[int]:
    yield x + 1


def drive(make: Callable[[int], Coroutine[Any, Any, int]], n: int) -> None:
    """Create and run ``n`` coroutines to completion by hand (no event loop: its cost would
    swamp the wrapper's)."""
    for i in range(n):
        with contextlib.suppress(StopIteration):
            make(i).send(None)


def loop_coroutine_bare(n: int) -> None:
    drive(coroutine_f, n)


@traced
def coroutine_root(n: int) -> None:
    """Every coroutine nests under this one invocation, as the flat shape's calls do."""
    drive(traced_coroutine_f, n)


def iterate(make: Callable[[int], Iterator[int]], n: int) -> None:
    for i in range(n):
        for _ in make(i):
            pass


def loop_generator_bare(n: int) -> None:
    iterate(generator_f, n)


@traced
def generator_root(n: int) -> None:
    iterate(traced_generator_f, n)


def items(n: int) -> Iterator[int]:
    yield from range(n)


@traced
def traced_items(n: int) -> Iterator[int]:
    yield from range(n)


def steps_bare(n: int) -> None:
    for _ in items(n):
        pass


@traced
def steps_root(n: int) -> None:
    """One traced generator of ``n`` items: its cost is its ``n`` resumes and yields."""
    for _ in traced_items(n):
        pass


def timed(
    run: Callable[[int], None], n: int, calls: int, until: Callable[[], object] = lambda: None
) -> float:
    """CPU ns (all threads of this process) per call of one chunk, up to when ``until`` returns."""
    started = time.process_time_ns()
    run(n)
    until()
    return (time.process_time_ns() - started) / calls


def tree_chunk(top: Callable[[int], None]) -> Callable[[int], None]:
    def run(trees: int) -> None:
        for i in range(trees):
            top(i)

    return run


# -- third-party anchors -------------------------------------------------------------------------


def otel_variant(calls: int) -> Callable[[], float]:
    """An OpenTelemetry SDK span around each call, nested in one root span; the provider has no
    span processor, so nothing is exported: this is the cost of the span alone."""
    from opentelemetry.sdk.trace import TracerProvider

    otel = TracerProvider().get_tracer("invoseq-benchmark")

    def run(n: int) -> None:
        start = otel.start_as_current_span
        with start("root"):
            for i in range(n):
                with start("f"):
                    f(i)

    return lambda: timed(run, calls, calls)


def viztracer_variant(calls: int, notes: list[str]) -> Callable[[], float] | None:
    try:
        from viztracer import VizTracer  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        notes.append("VizTracer is not installed: its row is skipped (pip install viztracer)")
        return None
    viz = VizTracer(verbose=0, tracer_entries=4 * calls + 10_000)

    def chunk() -> float:
        viz.start()
        try:
            return timed(loop_bare, calls, calls)
        finally:
            viz.stop()
            viz.clear()

    return chunk


# -- the phases ----------------------------------------------------------------------------------


def recording_phase(params: dict[str, Any], notes: list[str]) -> dict[str, list[float]]:
    calls, budget = params["calls"], params["budget_s"]
    trees = max(1, calls // TREE_CALLS)
    otel_calls = max(100, calls // 20)
    strands = max(100, calls // 4)  # a coroutine or generator costs several calls' time
    hour = 3_600_000
    with capture(flush_interval_ms=hour, heartbeat_ms=hour, sample_interval_ms=0) as trace:

        def discard_buffered() -> None:
            tracer.flush(60)
            trace.transport.batches.clear()

        def traced_chunk(run: Callable[[int], None], n: int, per: int) -> Callable[[], float]:
            def chunk() -> float:
                try:
                    return timed(run, n, n * per)
                finally:
                    discard_buffered()

            return chunk

        variants: dict[str, Callable[[], float]] = {
            "bare": lambda: timed(loop_bare, calls, calls),
            "flat": traced_chunk(flat_root, calls, 1),
            "roots": traced_chunk(loop_traced, calls, 1),
            "tree_bare": lambda: timed(tree_chunk(bare_top), trees, trees * TREE_CALLS),
            "tree": traced_chunk(tree_chunk(traced_top), trees, TREE_CALLS),
            "coroutine_bare": lambda: timed(loop_coroutine_bare, strands, strands),
            "coroutine": traced_chunk(coroutine_root, strands, 1),
            "generator_bare": lambda: timed(loop_generator_bare, strands, strands),
            "generator": traced_chunk(generator_root, strands, 1),
            "steps_bare": lambda: timed(steps_bare, calls, calls),
            "steps": traced_chunk(steps_root, calls, 1),
            "otel": otel_variant(otel_calls),
        }
        viz = viztracer_variant(calls, notes)
        if viz is not None:
            variants["viztracer"] = viz
        return interleave(variants, rounds=params["rounds"], budget_s=budget)


def acknowledged() -> None:
    if not tracer.flush(60):
        raise RuntimeError("the repository did not acknowledge within 60 s")


SENDER_STATS = ("sent_events", "dropped_events", "spooled_batches")


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def send_to(endpoint: str, configured: dict[str, str], run: Callable[[int], None], n: int) -> None:
    """Configure the tracer to send to ``endpoint`` unless it does already. Then one chunk,
    untimed: a new sender's first records and encodings go into new memory (its threads'
    buffers, the blocks the sender reuses), which a long-running program pays once."""
    if configured.get("endpoint") == endpoint:
        return
    tracer.configure(endpoint=endpoint, sample_interval_ms=0, flush_timeout_ms=60_000)
    configured["endpoint"] = endpoint
    run(n)
    acknowledged()


def sender_phase(
    params: dict[str, Any], workdir: Path
) -> tuple[dict[str, list[float]], dict[str, int]]:
    from cmr.server.server import ServerThread
    from cmr.store import Store, open_store

    calls, embedded_calls = params["calls"], params["embedded_calls"]
    trees = max(1, calls // TREE_CALLS)
    generation = 0
    endpoints: dict[str, str] = {}
    servers: list[subprocess.Popen[str]] = []
    threads: list[tuple[ServerThread, Store]] = []
    # The sender's counters, and the flat chunks' page faults (the whole process) and calls.
    totals = dict.fromkeys((*SENDER_STATS, "flat_faults", "flat_calls"), 0)
    configured: dict[str, str] = {}  # the endpoint the tracer sends to now

    def retire() -> None:
        tracer.shutdown(60)
        configured.clear()
        while servers:
            stop(servers.pop())
        while threads:
            thread, store = threads.pop()
            thread.stop()
            store.close()

    def new_repositories() -> None:  # every round: keeps the disk use of a run bounded
        nonlocal generation
        retire()
        generation += 1
        for stale in workdir.glob(f"*-{generation - 1}.*"):
            stale.unlink()
        command = [sys.executable, "-m", "cmr.server", "--bind"]
        command += [f"ipc://{workdir}/serve-{generation}.sock"]
        command += ["--memory"]  # the fastest real store: the acknowledgements come soonest
        server, endpoints["serve"] = start_reporting(command, READY_PREFIX)
        servers.append(server)
        store = open_store(str(workdir / f"embedded-{generation}.sqlite"))
        thread = ServerThread(store, f"ipc://{workdir}/embedded-{generation}.sock")
        threads.append((thread, store))
        endpoints["embedded"] = thread.endpoint

    def sending(to: str, run: Callable[[int], None], n: int, per: int) -> Callable[[], float]:
        def chunk() -> float:
            send_to(endpoints[to], configured, run, n)
            before = tracer.stats()
            faulted = minor_faults()
            cost = timed(run, n, n * per, until=acknowledged)
            if run is flat_root and to == "serve":
                totals["flat_faults"] += minor_faults() - faulted
                totals["flat_calls"] += n * per
            after = tracer.stats()
            for key in SENDER_STATS:
                totals[key] += getattr(after, key) - getattr(before, key)
            return cost

        return chunk

    variants: dict[str, Callable[[], float]] = {
        "bare": lambda: timed(loop_bare, calls, calls),
        "flat": sending("serve", flat_root, calls, 1),
        "roots": sending("serve", loop_traced, calls, 1),
        "tree_bare": lambda: timed(tree_chunk(bare_top), trees, trees * TREE_CALLS),
        "tree": sending("serve", tree_chunk(traced_top), trees, TREE_CALLS),
        "embedded": sending("embedded", flat_root, embedded_calls, 1),
    }
    try:
        results = interleave(
            variants,
            rounds=params["rounds"],
            budget_s=params["budget_s"],
            before_round=new_repositories,
        )
    finally:
        retire()
    return results, totals


def implementation() -> dict[str, Any]:
    """Which hot path ran: as ``tracer._core.decorator.IMPLEMENTATION`` says ("c" or "python"), or,
    in a tracer that predates it, the C accelerator when it was loaded and not turned off."""
    from tracer._core import decorator

    pure_requested = os.environ.get("INVOSEQ_PURE") == "1"
    loaded = "tracer._core._speedups" in sys.modules
    declared = getattr(decorator, "IMPLEMENTATION", None)
    accelerated = declared == "c" if declared is not None else loaded and not pure_requested
    wrapper = traced_f
    code = getattr(wrapper, "__code__", None)
    return {
        "name": "C accelerator" if accelerated else "pure Python",
        "declared": declared,
        "speedups_loaded": loaded,
        "invoseq_pure": pure_requested,
        "wrapper_type": type(wrapper).__qualname__,
        "wrapper_file": Path(code.co_filename).name if code is not None else None,
    }


def main() -> None:
    params = worker_params()
    workdir = Path(params["workdir"])
    notes: list[str] = []
    recording = recording_phase(params["recording"], notes)
    sending, totals = sender_phase(params["sender"], workdir)
    report_result(
        {
            "implementation": implementation(),
            "recording": recording,
            "sender": sending,
            "sender_stats": totals,
            "notes": notes,
        }
    )


if __name__ == "__main__":
    main()

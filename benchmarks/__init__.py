"""invoseq's benchmark suite: ``python -m benchmarks [--quick] [--only NAME ...] [--out DIR]``.

One module per area; each exposes ``run(Settings) -> CaseResult``. The overhead, throughput,
sampler and memory cases measure in worker subprocesses (``*_worker.py``), each a clean traced
interpreter. The budgets below bound the measuring loops of each case; setup comes on top, and
``views`` runs a fixed, small number of rounds per size (the 1 M tree alone takes over a
minute), and ``idle`` watches four programs over fixed windows (20 s each, 6 s with --quick). A
full run takes about 7 minutes and a quick one under two on a 2-core machine.
docs/performance.md shows a full run and how to read it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from benchmarks.harness import CaseResult, Settings


@dataclass(frozen=True, slots=True)
class Case:
    module: str
    summary: str
    budget_s: float
    quick_budget_s: float

    def run(self, settings: Settings) -> CaseResult:
        """Imported on use, so ``--only`` loads only what it runs."""
        runner: Callable[[Settings], CaseResult] = importlib.import_module(
            f"benchmarks.{self.module}"
        ).run
        return runner(settings)


CASES: Final = {
    "overhead": Case("overhead", "ns per traced call against a bare call", 60, 12),
    "throughput": Case("throughput", "events/s from a traced process into the repository", 25, 6),
    "ingest": Case("ingest", "durable ingest events/s of pre-encoded batches", 10, 3),
    "sequences": Case(
        "short_sequences", "sequences/s of one- and ten-call sequences, per store", 110, 20
    ),
    "serve": Case("serve", "cmr serve over a socket, one process against --workers 2", 25, 6),
    "sampler": Case("sampler", "sampler overhead at 100 Hz with 32 threads", 35, 8),
    "views": Case("views", "cmr show / cmr profile on 10 k to 1 M invocations", 20, 6),
    "reads": Case("reads", "cmr show / cmr profile of 1 M calls with samples, two shapes", 200, 20),
    "memory": Case("memory", "tracer RSS with the repository down", 20, 8),
    "listing": Case("listing", "cmr ls queries over 200 k sequences against plain cmr ls", 15, 5),
    "beside": Case("beside", "a traced loop under coverage, VizTracer, sys.settrace", 40, 10),
    "startup": Case("startup", "import tracer, cmr --help, cmr ls against python -c pass", 20, 6),
    "real": Case("real", "a real program's calls (sqlparse) traced, bare, under VizTracer", 60, 20),
    "script": Case("script_loop", "a script's module-level loop, tracer run against bare", 20, 6),
    "million": Case("million", "a million traced calls a second under tracer run: dropped", 90, 30),
    "endrun": Case("endrun", "what tracer run spends after the program, per M events", 60, 20),
    "idle": Case("idle", "CPU of idle traced processes (a script, gunicorn) against bare", 100, 40),
    "requests": Case("requests", "requests/s of Flask/gunicorn, FastAPI/uvicorn traced", 100, 24),
}

"""Case ``requests`` (issue 33): requests/s of a traced web service against the same one bare.

Two services, each started as users start them, bare and under ``python -m tracer run --include
APP`` (its embedded repository listening, the sampler at its default): a Flask app under
``gunicorn -k sync -w 1`` and a FastAPI app under ``uvicorn``. Each route does a fixed amount of
work of its own (``WORK`` iterations of a loop in the view, about a millisecond) and makes
``/calls/N`` traced calls (N = 1 and 10); the view and the request are two more invocations.

A load generator of our own (``benchmarks.load``, in this process) keeps four requests in
flight, so the server always has the next one waiting: uvicorn keeps the connections alive;
gunicorn's sync worker closes each one after its response (it has no keep-alive), so the client
connects again. Each service is started three times bare and three times traced (``SERVERS``:
two processes of the same server differ by a few percent for their whole life, here ±20 µs of
its 0.7 ms a request, so one pair of them decided the ratio). Every round sends ``requests``
requests to each variant (bare and traced, 1 and 10 calls) in turn, each to the next of its
servers, the order reversed every other round. A row is the traced
requests/s reached (the upper quartile of the rounds: the machine's other load only slows a
chunk), its ratio to bare, and the per-request difference in ms; the fixed cost per request is
the intercept of that difference at zero calls, from the 1- and 10-call routes. The medians, and
the per-request difference paired by round, are in the notes. Beside each chunk, the CPU time of
the server's processes (every thread), of the embedded repository and of the load generator, per
request.

On a shared 2-core machine the wall figures move by tens of percent from one chunk to the next,
so each service is also measured without its server (``requests_worker``): the application,
without its views' loop of work, called in-process as the server calls it, bare and under
``tracer run``, in chunks timed on the thread's CPU clock, a chunk preempted by the machine's other
load not charged for the wait: the request path's own cost, which the tracer controls.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Final

from benchmarks.harness import (
    CaseResult,
    Row,
    Settings,
    Target,
    interleave,
    median,
    ratio_error_pct,
    spread,
)
from benchmarks.load import load
from benchmarks.processes import (
    clean_environment,
    cpu_ns,
    free_port,
    process_tree,
    run_worker,
    stop,
)

NAME: Final = "requests"
#: Iterations of the views' own loop: about a millisecond of work per request here.
WORK: Final = 20_000
CALLS: Final = (1, 10)
RATIO_TARGET: Final = Target("final", ">=", 0.9, on="ratio")
#: Servers started for each of bare and traced, a round's chunks going to the next one in turn:
#: one process of the same server serves a few percent faster or slower than another, as long
#: as it lives (its memory's layout), which one pair of them would put into the ratio.
SERVERS: Final = 3
FIXED_TARGET: Final = Target("final", "<=", 0.1)

COMMON: Final = f"""\
def leaf(i):
    return i + 1


def work():
    total = 0
    for i in range({WORK}):
        total += i
    return total


def handle(n):
    total = work()
    for i in range(n):
        total += leaf(i)
    return str(total)
"""

FLASK_APP: Final = (
    COMMON
    + """

from flask import Flask

app = Flask(__name__)


@app.route("/calls/<int:n>")
def calls(n):
    return handle(n)
"""
)

FASTAPI_APP: Final = (
    COMMON
    + """

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

app = FastAPI()


@app.get("/calls/{n}", response_class=PlainTextResponse)
async def calls(n: int):
    return handle(n)
"""
)


def server_command(kind: str, port: int, traced: bool, workdir: Path) -> list[str]:
    """How a user starts the service (``kind`` "flask" or "fastapi"), bare or traced."""
    module = f"req_{kind}"
    prefix = (
        [
            "-m",
            "tracer",
            "run",
            "--no-report",
            "--db",
            str(workdir / f"{module}-{port}.sqlite"),
            "--include",
            module,
        ]
        if traced
        else []
    )
    if kind == "flask":
        server = ["-m", "gunicorn", "-k", "sync", "-w", "1", "-b", f"127.0.0.1:{port}"]
        return [sys.executable, *prefix, *server, f"{module}:app"]
    server = ["-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port)]
    return [sys.executable, *prefix, *server, f"{module}:app"]


def write_apps(workdir: Path, work: int = WORK) -> None:
    """The two services' modules, their views looping ``work`` times."""
    for kind, text in (("flask", FLASK_APP), ("fastapi", FASTAPI_APP)):
        (workdir / f"req_{kind}.py").write_text(text.replace(f"range({WORK})", f"range({work})"))


@contextmanager
def serving(kind: str, traced: bool, workdir: Path, **settings: str) -> Iterator[tuple[int, int]]:
    """A server started and answering: its port and pid. Stopped (SIGTERM, then SIGKILL) at
    the end."""
    port = free_port()
    env = clean_environment(INVOSEQ_SPOOL_DIR=str(workdir / "spool"), **settings)
    process = subprocess.Popen(
        server_command(kind, port, traced, workdir),
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{kind} server exited {process.returncode}")
            try:
                load(port, "/calls/1", 2, 1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} server did not answer") from None
                time.sleep(0.1)
        yield port, process.pid
    finally:
        stop(process)


class _Variant:
    """One variant's chunks, each from the next of its servers in turn: requests/s, and CPU µs a
    request of that server's processes (the embedded repository's apart) kept beside them."""

    def __init__(self, servers: list[tuple[int, int]], calls: int, requests: int) -> None:
        self.servers, self.path, self.requests = servers, f"/calls/{calls}", requests
        self.cpu: list[float] = []
        self.repository: list[float] = []
        self.client: list[float] = []
        self.warm = False
        self.chunks = 0

    def __call__(self) -> float:
        port, pid = self.servers[self.chunks % len(self.servers)]
        self.chunks += 1
        program, repository = process_tree(pid)
        before = cpu_ns(program), cpu_ns(repository), time.thread_time_ns()
        took = load(port, self.path, self.requests)
        after = cpu_ns(program), cpu_ns(repository), time.thread_time_ns()
        if self.warm:  # the harness's warm-up chunk is not kept: nor are its CPU figures
            self.cpu.append((after[0] - before[0]) / 1000 / self.requests)
            self.repository.append((after[1] - before[1]) / 1000 / self.requests)
            self.client.append((after[2] - before[2]) / 1000 / self.requests)
        self.warm = True
        return self.requests / took


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    write_apps(settings.workdir)
    requests = 100 if settings.quick else 300
    for kind, label in (
        ("flask", "Flask under gunicorn -k sync -w 1"),
        ("fastapi", "FastAPI under uvicorn"),
    ):
        with ExitStack() as stack:
            servers = {
                traced: [
                    stack.enter_context(serving(kind, traced, settings.workdir))
                    for _ in range(SERVERS)
                ]
                for traced in (False, True)
            }
            for port, _ in servers[False] + servers[True]:
                load(port, f"/calls/{CALLS[-1]}", 200)  # warm, each of them
            variants = {
                f"{'traced' if traced else 'bare'} {calls}": _Variant(
                    servers[traced], calls, requests
                )
                for traced in (False, True)
                for calls in CALLS
            }
            series = interleave(
                dict(variants),
                rounds=10 if settings.quick else 40,
                min_rounds=3,
                budget_s=settings.budget_s / 2,
            )
        _rows(result, kind, label, series, variants)
        _in_process(result, kind, label, settings)
    return result


def _in_process(result: CaseResult, kind: str, label: str, settings: Settings) -> None:
    """The request path alone: the application (without its views' loop of work) called
    in-process (``requests_worker``), bare and under ``tracer run``, alternating; each process's
    10th-percentile chunk."""
    workdir = settings.workdir / "in-process"  # the apps without their loop of work
    workdir.mkdir(exist_ok=True)
    write_apps(workdir, 0)
    env = clean_environment(INVOSEQ_SPOOL_DIR=str(settings.workdir / "spool"))
    db = str(workdir / f"{kind}.sqlite")
    traced = ["-m", "tracer", "run", "--no-report", "--db", db, "--include", f"req_{kind}"]
    params = {
        "kind": kind,
        "workdir": str(workdir),
        "calls": CALLS[1],
        "chunks": 20 if settings.quick else 40,
        "per_chunk": 50 if settings.quick else 100,
    }

    def chunk(prefix: list[str]) -> Callable[[], float]:
        def measure() -> float:
            chunks = run_worker(
                "benchmarks.requests_worker", params, timeout_s=120, env=env, prefix=prefix
            )["chunks"]
            return float(chunks[len(chunks) // 10])

        return measure

    series = interleave(
        {"bare": chunk([]), "traced": chunk(traced)},
        rounds=3 if settings.quick else 6,
        min_rounds=2,
        budget_s=settings.budget_s / 4,
        warmup=False,
    )
    result.raw[f"{kind} in-process"] = series
    added = [t - b for t, b in zip(series["traced"], series["bare"], strict=True)]
    result.rows.append(
        Row(
            case=NAME,
            name=f"{label}: the request path in-process, CPU a request added by tracing",
            value=median(added),
            unit="µs",
            baseline=median(series["bare"]),
            baseline_name="the application's CPU a request, bare",
            targets=(Target("final", "<=", 100),),
            note=f"{CALLS[1]} traced calls a request; each process's 10th-percentile chunk of "
            f"thread CPU time, paired by round: {', '.join(f'{a:.1f}' for a in added)} µs",
        )
    )


def upper_quartile(values: list[float]) -> float:
    """The rate reached in the best quarter of the rounds: the machine's other load only ever
    slows a chunk (a stalled one, at a third of the rate, is not rare here), so the upper
    quartile says what the server does when let, the median how often it was not."""
    return statistics.quantiles(values, n=4)[2] if len(values) > 1 else median(values)


def _rows(
    result: CaseResult,
    kind: str,
    label: str,
    series: dict[str, list[float]],
    variants: dict[str, _Variant],
) -> None:
    result.raw[kind] = {
        name: {
            "requests/s": values,
            "cpu µs a request": variants[name].cpu,
            "repository cpu µs a request": variants[name].repository,
            "client cpu µs a request": variants[name].client,
        }
        for name, values in series.items()
    }
    cpu = {name: median(variant.cpu) for name, variant in variants.items()}
    differences = {}
    for calls in CALLS:
        bare, traced = series[f"bare {calls}"], series[f"traced {calls}"]
        result.noise[f"{kind} bare {calls}"] = spread(bare)
        reached, reached_bare = upper_quartile(traced), upper_quartile(bare)
        differences[calls] = 1000 / reached - 1000 / reached_bare
        paired = zip(traced, bare, strict=True)
        paired_ms = median([1000 / t - 1000 / b for t, b in paired])
        result.rows.append(
            Row(
                case=NAME,
                name=f"{label}, {calls} traced call{'s' if calls > 1 else ''} a request",
                value=reached,
                unit="requests/s",
                baseline=reached_bare,
                baseline_name="the same, bare",
                ratio=reached / reached_bare,
                targets=(RATIO_TARGET,),
                note=f"{differences[calls]:+.3f} ms a request; medians {median(traced):.0f} "
                f"against {median(bare):.0f} requests/s, {paired_ms:+.3f} ms a request paired "
                f"by round, ratio ±{ratio_error_pct(traced, bare):.1f} %; server CPU a request "
                f"{cpu[f'traced {calls}']:.0f} µs against {cpu[f'bare {calls}']:.0f} µs bare, "
                f"embedded repository {median(variants[f'traced {calls}'].repository):.0f} µs",
            )
        )
    low, high = CALLS
    slope = (differences[high] - differences[low]) / (high - low)
    result.rows.append(
        Row(
            case=NAME,
            name=f"{label}: fixed cost a request (intercept at 0 calls)",
            value=differences[low] - slope * low,
            unit="ms",
            targets=(FIXED_TARGET,),
            note=f"{slope * 1000:.2f} µs a traced call",
        )
    )
    added = {
        calls: median(
            [
                t - b
                for t, b in zip(
                    variants[f"traced {calls}"].cpu, variants[f"bare {calls}"].cpu, strict=True
                )
            ]
        )
        for calls in CALLS
    }
    client = median([value for variant in variants.values() for value in variant.client])
    result.rows.append(
        Row(
            case=NAME,
            name=f"{label}: server CPU a request added by tracing, {low} call",
            value=added[low],
            unit="µs",
            baseline=cpu[f"bare {low}"],
            baseline_name="the server's CPU a request, bare",
            note=f"{added[high]:.0f} µs with {high} calls; the embedded repository "
            f"{median(variants[f'traced {low}'].repository):.0f} µs beside it; "
            f"the load generator {client:.0f} µs a request",
        )
    )

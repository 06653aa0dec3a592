"""Case 1: overhead per traced call of ``def f(x): return x + 1``, against a bare call.

Shapes: *flat* (every call nested in one traced root), *roots* (every call a sequence of its
own) and a *tree* (a root calling 10 children calling 10 leaves each: 111 calls); and the same
function as a coroutine (run by hand, no event loop) and as a one-item generator, nested in a
root, each against its bare twin. Overhead is ``traced - bare`` in CPU ns per call, both
medians of interleaved chunks of one run; the ratio is ``traced / bare``. Beside them, the
OpenTelemetry SDK span and VizTracer (the test extra installs it), and the nested call's
overhead as a ratio to VizTracer's, both measured in the same run.
The rows *recording only* time the hot path alone; *sent to cmr serve* add all the sender does
for those events, up to the repository's acknowledgement (see ``overhead_worker``).

The measuring happens in ``benchmarks.overhead_worker`` subprocesses: once per implementation of
the hot path (the C accelerator, when ``tracer._core._speedups`` is built, and the pure-Python path
with ``INVOSEQ_PURE=1``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from benchmarks.harness import CaseResult, Row, Settings, Target, difference_error, median, spread
from benchmarks.machine import accelerator
from benchmarks.processes import clean_environment, run_worker

NAME: Final = "overhead"
#: Issue 17's targets, per implementation and shape: a nested call (flat, tree) at most 100 ns
#: and roots 150 ns with the C accelerator, a nested call 450 ns in pure Python; the nested call
#: at most 0.6 of VizTracer's per-call overhead (C).
TARGETS: Final = {
    ("C accelerator", "flat"): (Target("final", "<=", 100),),
    ("C accelerator", "tree"): (Target("final", "<=", 100),),
    ("C accelerator", "roots"): (Target("final", "<=", 150),),
    ("pure Python", "flat"): (Target("final", "<=", 450),),
    ("pure Python", "tree"): (Target("final", "<=", 450),),
}
VIZTRACER_RATIO: Final = Target("final", "<=", 0.6)
#: Calls per recording chunk. Short chunks, their events discarded after each, time the hot path
#: alone; events piling up over tens of thousands of calls also make the garbage collector work
#: harder, and the sender rows (long chunks, drained every flush interval) include that.
RECORDING_CALLS: Final = 2_000

#: (variant, its baseline, label) for the rows of the tracer's own shapes.
SHAPES: Final = (
    ("flat", "bare", "flat: nested in one root"),
    ("roots", "bare", "roots: each call a new sequence"),
    ("tree", "tree_bare", "tree 1→10→100, per call"),
)
#: Recorded only (the sender rows time the sync shapes): coroutines and generators.
STRANDS: Final = (
    ("coroutine", "coroutine_bare", "coroutine, nested in one root"),
    ("generator", "generator_bare", "generator of one item, nested in one root"),
    ("steps", "steps_bare", "a traced generator's resume and yield, per item"),
)


def _params(settings: Settings, implementations: int) -> dict[str, Any]:
    """Recording chunks are short (their events are discarded after each, as a sender would
    drain them), so the hot path is timed alone; sender chunks span many flush intervals."""
    budget = settings.budget_s / implementations
    return {
        "recording": {"calls": RECORDING_CALLS, "rounds": 1000, "budget_s": 0.45 * budget},
        "sender": {
            "calls": 40_000 if settings.quick else 60_000,
            "embedded_calls": 5_000 if settings.quick else 10_000,
            "rounds": 20,
            "budget_s": 0.35 * budget,
        },
    }


def run(settings: Settings) -> CaseResult:
    result = CaseResult()
    variants: list[tuple[str, dict[str, str]]] = [("default", {})]
    if accelerator()["importable"]:
        variants.append(("pure", {"INVOSEQ_PURE": "1"}))
    else:
        result.notes.append(
            "tracer._core._speedups (the C accelerator) is not built here: pure Python only"
        )
    for label, extra in variants:
        workdir = settings.workdir / f"overhead-{label}"
        workdir.mkdir()
        params = {**_params(settings, len(variants)), "workdir": str(workdir)}
        env = clean_environment(INVOSEQ_SPOOL_DIR=str(workdir / "spool"), **extra)
        timeout = settings.budget_s * 3 + 120
        measured = run_worker("benchmarks.overhead_worker", params, timeout_s=timeout, env=env)
        _rows(result, measured, suffix=f" [{measured['implementation']['name']}]")
    return result


def _rows(result: CaseResult, measured: dict[str, Any], suffix: str) -> None:
    impl = measured["implementation"]
    result.raw[f"implementation{suffix}"] = impl
    result.notes.extend(n for n in measured["notes"] if n not in result.notes)
    for phase, title in (("recording", "recording only"), ("sender", "sent to cmr serve")):
        series: dict[str, list[float]] = measured[phase]
        result.raw[f"{phase}{suffix}"] = series
        result.noise[f"{phase}.bare{suffix}"] = spread(series["bare"])
        shapes = SHAPES + STRANDS if phase == "recording" else SHAPES
        for variant, baseline, label in shapes:
            targets = TARGETS.get((impl["name"], variant), ()) if phase == "recording" else ()
            row = _overhead_row(series, variant, baseline, f"{label}, {title}{suffix}")
            result.rows.append(dataclasses.replace(row, targets=targets))
        if phase == "recording":
            result.rows.extend(_anchor_rows(series, suffix))
            viz = _viztracer_ratio_row(series, suffix, impl["name"] == "C accelerator")
            if viz is not None:
                result.rows.append(viz)
    embedded = _overhead_row(
        measured["sender"], "embedded", "bare", f"flat, repository in the same process{suffix}"
    )
    note = "cmr.server.server.ServerThread: its ingest (SQLite) is paid by the traced process; "
    note += embedded.note
    result.rows.append(dataclasses.replace(embedded, targets=(), note=note))
    stats = measured["sender_stats"]
    if stats.get("flat_calls"):  # a worker of a tracer that predates the count has none
        result.rows.append(
            Row(
                case=NAME,
                name=f"flat, sent to cmr serve: page faults per 1,000 calls{suffix}",
                value=1000 * stats["flat_faults"] / stats["flat_calls"],
                unit="faults",
                note="the whole traced process, chunks to their acknowledgement: fresh memory "
                "written (before stop 60's reused blocks: about 33)",
            )
        )
    if stats["dropped_events"]:
        result.notes.append(f"sender phase{suffix}: {stats} (expected no drops)")
    else:
        result.notes.append(
            f"sender phase{suffix}: {stats['sent_events']} events acknowledged, none dropped"
        )


BASELINE_NAMES: Final = {
    "tree_bare": "bare tree, per call",
    "coroutine_bare": "bare coroutine",
    "generator_bare": "bare generator",
}


def _overhead_row(series: dict[str, list[float]], variant: str, baseline: str, name: str) -> Row:
    traced, bare = median(series[variant]), median(series[baseline])
    return Row(
        case=NAME,
        name=name,
        value=traced - bare,
        unit="ns",
        baseline=bare,
        baseline_name=BASELINE_NAMES.get(baseline, "bare call"),
        ratio=traced / bare,
        note=f"{len(series[variant])} chunks; traced {traced:.0f} ns/call",
        error=difference_error(series[variant], series[baseline]),
    )


def _viztracer_ratio_row(series: dict[str, list[float]], suffix: str, c: bool) -> Row | None:
    """The nested call's overhead over VizTracer's, both measured in this run."""
    if "viztracer" not in series:
        return None
    bare = median(series["bare"])
    ours, theirs = median(series["flat"]) - bare, median(series["viztracer"]) - bare
    return Row(
        case=NAME,
        name=f"flat: nested call / VizTracer's per-call overhead{suffix}",
        value=ours / theirs,
        unit="x",
        baseline=theirs,
        baseline_name="VizTracer's overhead (ns)",
        baseline_unit="ns",
        targets=(VIZTRACER_RATIO,) if c else (),
        note=f"{ours:.0f} ns / {theirs:.0f} ns",
    )


def _anchor_rows(series: dict[str, list[float]], suffix: str) -> list[Row]:
    rows = []
    bare = median(series["bare"])
    anchors = (
        ("otel", "OpenTelemetry SDK span (no processor)", "anchor: 13-18 µs"),
        ("viztracer", "VizTracer, every call", "anchor: +126 ns"),
    )
    for variant, label, anchor in anchors:
        if variant not in series:
            continue
        cost = median(series[variant])
        rows.append(
            Row(
                case=NAME,
                name=f"{label}{suffix}",
                value=cost - bare,
                unit="ns",
                baseline=bare,
                baseline_name="bare call",
                ratio=cost / bare,
                note=f"{anchor} (DESIGN.md); {len(series[variant])} chunks",
                error=difference_error(series[variant], series["bare"]),
            )
        )
    return rows

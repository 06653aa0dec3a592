"""The measuring discipline every case follows: interleaved chunks, medians, ratios, bounded loops.

Absolute times on a shared 2-core VM move by tens of percent from one minute to the next, so no
case reports one alone: each runs its variants in chunks, alternating A B C, C B A, ... (so a slow
drift of the machine hits every variant alike), takes the median of each variant's chunks, and
reports the ratio to a baseline measured in the same run. The spread of the baseline's own chunks
is kept as the noise the ratio has to be read against.

Every loop here is bounded twice: by a number of rounds and by a time budget.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Target:
    """A budget line: ``value <= limit`` (or ``>=``), on the row's value or on its ratio."""

    label: str  # "first", "final", or a short name for a target of our own
    op: str  # "<=" or ">="
    limit: float
    on: str = "value"  # "value" or "ratio"

    def describe(self, unit: str) -> str:
        shown = format_value(self.limit, unit) if self.on == "value" else f"{self.limit:g}x"
        return f"{self.label} {'≤' if self.op == '<=' else '≥'} {shown}"


@dataclass(frozen=True, slots=True)
class Verdict:
    target: Target
    met: bool
    margin: float  # how far inside (met) or outside (missed) the limit, in the target's unit
    within_noise: bool = False  # the margin is smaller than the value's standard error

    def describe(self, unit: str) -> str:
        verdict = f"{self.target.label}: {'met' if self.met else 'missed'}"
        if self.margin == 0:
            return verdict
        if self.target.on == "ratio":
            return f"{verdict} by {abs(self.margin):.3g}x"
        verdict += f" by {format_value(abs(self.margin), unit)}"
        return verdict + " (within the noise)" if self.within_noise else verdict


@dataclass(frozen=True, slots=True)
class Row:
    """One result: a value, the baseline measured beside it, their ratio, and the targets."""

    case: str
    name: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    baseline_unit: str = ""  # when it differs from ``unit``
    ratio: float | None = None
    targets: tuple[Target, ...] = ()
    note: str = ""
    #: One standard error of ``value`` from the chunks' spread (None: too few chunks to say).
    error: float | None = None

    def verdicts(self) -> list[Verdict]:
        found = []
        for target in self.targets:
            measured = self.value if target.on == "value" else self.ratio
            if measured is None:
                continue
            inside = target.limit - measured if target.op == "<=" else measured - target.limit
            noisy = target.on == "value" and self.error is not None and abs(inside) < self.error
            found.append(Verdict(target, inside >= 0, inside, noisy))
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "baseline_name": self.baseline_name,
            "baseline_unit": self.baseline_unit or self.unit,
            "ratio": self.ratio,
            "targets": [
                {"label": t.label, "op": t.op, "limit": t.limit, "on": t.on} for t in self.targets
            ],
            "verdicts": [
                {
                    "target": v.target.label,
                    "met": v.met,
                    "margin": v.margin,
                    "within_noise": v.within_noise,
                }
                for v in self.verdicts()
            ],
            "error": self.error,
            "note": self.note,
        }


@dataclass(slots=True)
class CaseResult:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    noise: dict[str, dict[str, float]] = field(default_factory=dict)  # series -> spread
    raw: dict[str, Any] = field(default_factory=dict)  # per-chunk values, for the JSON file


@dataclass(frozen=True, slots=True)
class Settings:
    """What a case may spend: ``quick`` shrinks sizes; ``budget_s`` bounds its measuring."""

    quick: bool
    budget_s: float
    workdir: Path  # a private temporary directory, removed after the run


# -- statistics ---------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def spread(values: Sequence[float]) -> dict[str, float]:
    """How much repeated chunks of one variant disagree: the noise a ratio is read against."""
    if not values:
        return {"n": 0}
    mid = median(values)
    quartiles = statistics.quantiles(values, n=4) if len(values) >= 2 else [mid, mid, mid]
    return {
        "n": len(values),
        "median": mid,
        "min": min(values),
        "max": max(values),
        "iqr_pct": 100 * (quartiles[2] - quartiles[0]) / mid if mid else float("nan"),
        "range_pct": 100 * (max(values) - min(values)) / mid if mid else float("nan"),
    }


def median_error(values: Sequence[float]) -> float:
    """One standard error of ``median(values)`` from their own spread: a median's is about
    1.25 sd/√n, and sd about IQR/1.35 (robust to the outliers a shared machine produces)."""
    if len(values) < 2:
        return float("nan")
    quartiles = statistics.quantiles(values, n=4)
    return 0.93 * (quartiles[2] - quartiles[0]) / math.sqrt(len(values))


def difference_error(a: Sequence[float], b: Sequence[float]) -> float:
    """One standard error of ``median(a) - median(b)``."""
    return math.hypot(median_error(a), median_error(b))


def ratio_error_pct(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """One standard error, in percent, of ``median(numerator) / median(denominator)``: a ratio
    closer to 1 than this cannot be told from noise."""
    return 100 * math.hypot(
        median_error(numerator) / median(numerator),
        median_error(denominator) / median(denominator),
    )


def interleave(
    variants: Mapping[str, Callable[[], float]],
    *,
    rounds: int,
    budget_s: float,
    min_rounds: int = 3,
    warmup: bool = True,
    before_round: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """One chunk of every variant per round, the order reversed every other round.

    Each callable runs one chunk and returns its measurement. Stops after ``rounds`` rounds, or
    once ``budget_s`` is spent and at least ``min_rounds`` are done. A warm-up round (discarded)
    comes first, so imports, caches and lazy starts do not land in the first chunk.
    ``before_round`` runs (untimed) before every round, the warm-up included."""
    names = list(variants)
    results: dict[str, list[float]] = {name: [] for name in names}
    if warmup:
        if before_round is not None:
            before_round()
        for name in names:
            variants[name]()
    started = time.monotonic()
    for done in range(rounds):
        if before_round is not None:
            before_round()
        order = names if done % 2 == 0 else names[::-1]
        for name in order:
            results[name].append(variants[name]())
        if done + 1 >= min_rounds and time.monotonic() - started > budget_s:
            break
    return results


# -- formatting ---------------------------------------------------------------------------------


def format_value(value: float, unit: str) -> str:
    """A value as the table shows it: three significant digits, a readable scale."""
    if math.isnan(value):
        return "n/a"
    if unit in ("events/s", "calls/s"):
        shown = float(f"{value:.3g}")  # 999,980 is shown as 1 M, not 1e+03 k
        scale, prefix = next(
            ((s, p) for s, p in ((1e6, "M "), (1e3, "k ")) if abs(shown) >= s), (1.0, "")
        )
        return f"{shown / scale:.3g} {prefix}{unit}"
    if unit == "ns" and abs(value) >= 10_000:
        value, unit = value / 1000, "µs"
    if unit == "%":
        return f"{value:.2f} %"
    digits = 3 if unit in ("s", "MiB", "µs") else 4
    return f"{value:.{digits}g} {unit}".rstrip()

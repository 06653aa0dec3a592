"""``python -m benchmarks [--quick] [--only NAME ...] [--out DIR]``: run the suite, write results.

Each case gets a share of the time budget (at most about 5 minutes in full, 60 s with --quick,
on a 2-core machine) and bounds its own loops by it; a case that fails is reported and the
others still run. Exit code: 0 when every case ran (whatever the verdicts), 1 when a case
failed or the command line was wrong.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import CASES, machine, report
from benchmarks.harness import CaseResult, Settings, format_value
from benchmarks.processes import private_directory

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="invoseq benchmarks: interleaved chunks, medians and ratios, bounded in time.",
        epilog="cases: " + ", ".join(f"{name} ({case.summary})" for name, case in CASES.items()),
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes: about 60 s in all")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", default=None, help="run only these cases"
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"results directory (default: {DEFAULT_OUT})"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    names = args.only or list(CASES)
    unknown = [name for name in names if name not in CASES]
    if unknown:
        print(
            f"benchmarks: unknown case {', '.join(unknown)} (choose from {', '.join(CASES)})",
            file=sys.stderr,
        )
        return 1
    command = "python -m benchmarks " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    run: dict[str, Any] = {
        "command": command.strip(),
        "quick": args.quick,
        "cases": names,
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load": {"before": machine.loadavg()},
    }
    before = machine.cpu_times()
    results: dict[str, CaseResult] = {}
    failures: dict[str, str] = {}
    with private_directory("invoseq-bench-") as workdir:
        for name in names:
            case = CASES[name]
            budget = case.quick_budget_s if args.quick else case.budget_s
            casedir = workdir / name
            casedir.mkdir()
            print(f"benchmarks: {name} (about {budget:.0f} s) ...", file=sys.stderr, flush=True)
            case_started = time.monotonic()
            try:
                results[name] = case.run(Settings(args.quick, budget, casedir))
            except Exception as exc:  # one failing case must not lose the others' results
                failures[name] = f"{type(exc).__name__}: {exc}"
                print(f"benchmarks: {name} FAILED: {failures[name]}", file=sys.stderr)
                continue
            took = time.monotonic() - case_started
            for row in results[name].rows:
                verdicts = "; ".join(v.describe(row.unit) for v in row.verdicts())
                shown = format_value(row.value, row.unit)
                print(f"  {row.name}: {shown}  {verdicts}", file=sys.stderr)
            print(f"benchmarks: {name} took {took:.0f} s", file=sys.stderr, flush=True)
    run["duration_s"] = time.monotonic() - started
    run["load"]["after"] = machine.loadavg()
    run["cpu_share"] = machine.busy_share(before, machine.cpu_times())
    run["noise"] = {name: result.noise for name, result in results.items()}
    stem = ("quick" if args.quick else "full") + "".join(f"-{n}" for n in args.only or ())
    paths = report.write(
        args.out, stem, results=results, machine=machine.record(), run=run, failures=failures
    )
    print(f"benchmarks: wrote {paths[0]} and {paths[1]}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

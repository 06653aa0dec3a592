"""The two outputs of a run: a JSON file with everything, and the Markdown table people read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.harness import CaseResult, Row, format_value

HEADER = (
    "| case | measurement | value | baseline | ratio | target | verdict |\n"
    "|---|---|---|---|---|---|---|"
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def row_line(row: Row) -> str:
    baseline = "—"
    if row.baseline is not None:
        shown = format_value(row.baseline, row.baseline_unit or row.unit)
        baseline = f"{shown} ({row.baseline_name})" if row.baseline_name else shown
    ratio = "—" if row.ratio is None else f"{row.ratio:.3g}x"
    targets = "; ".join(t.describe(row.unit) for t in row.targets) or "—"
    verdicts = "; ".join(v.describe(row.unit) for v in row.verdicts()) or "—"
    value = format_value(row.value, row.unit)
    if row.error is not None and row.error == row.error:  # not NaN
        value += f" ± {format_value(float(f'{row.error:.2g}'), row.unit)}"  # 2 digits
    cells = (row.case, row.name, value, baseline, ratio)
    return "| " + " | ".join(_cell(c) for c in (*cells, targets, verdicts)) + " |"


def markdown(
    results: Mapping[str, CaseResult],
    machine: Mapping[str, Any],
    run: Mapping[str, Any],
) -> str:
    lines = [
        f"# invoseq benchmarks ({'quick' if run['quick'] else 'full'} run)",
        "",
        f"Command: `{run['command']}`  ",
        f"Started {run['started']}, took {run['duration_s']:.0f} s.",
        "",
        HEADER,
    ]
    lines.extend(row_line(row) for result in results.values() for row in result.rows)
    lines += ["", "## Notes", ""]
    for case, result in results.items():
        lines.extend(f"- {case}: {note}" for note in result.notes)
        lines.extend(f"- {case}: row '{row.name}': {row.note}" for row in result.rows if row.note)
    lines += ["", "## Machine", "", *machine_lines(machine, run), ""]
    return "\n".join(lines)


def machine_lines(machine: Mapping[str, Any], run: Mapping[str, Any]) -> list[str]:
    libraries = ", ".join(f"{k} {v}" for k, v in machine["libraries"].items() if v)
    load = run.get("load", {})
    share = run.get("cpu_share", {})
    lines = [
        f"- CPU: {machine['cpu_model']} ({machine['cpu_mhz']} MHz), "
        f"{machine['cpu_count']} CPUs ({machine['cpus_usable']} usable); "
        f"memory {machine['memory_mib']} MiB",
        f"- Python {machine['python']} ({machine['implementation']}) on {machine['platform']}",
        f"- Libraries: {libraries}",
        "- C accelerator (tracer._core._speedups) importable: "
        f"{machine['accelerator']['importable']}",
        f"- Commit {machine['commit'] or '?'}"
        + (" with local changes" if machine["local_changes"] else ""),
        f"- Load average (1, 5, 15 min): before {load.get('before')}, after {load.get('after')}",
    ]
    if share:
        lines.append(
            f"- CPU busy during the run (all processes): {share['busy_pct']:.0f} %, "
            f"stolen by the hypervisor: {share['steal_pct']:.1f} %"
        )
    for case, noise in run.get("noise", {}).items():
        for series, values in noise.items():
            if values.get("n"):
                lines.append(
                    f"- Noise, {case} / {series}: {values['n']} chunks, interquartile range "
                    f"{values['iqr_pct']:.1f} % of the median, full range "
                    f"{values['range_pct']:.1f} %"
                )
    return lines


def write(
    out: Path,
    stem: str,
    *,
    results: Mapping[str, CaseResult],
    machine: Mapping[str, Any],
    run: Mapping[str, Any],
    failures: Mapping[str, str],
) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "run": dict(run),
        "machine": dict(machine),
        "failures": dict(failures),
        "cases": {
            case: {
                "rows": [row.to_json() for row in result.rows],
                "notes": result.notes,
                "noise": result.noise,
                "raw": result.raw,
            }
            for case, result in results.items()
        },
    }
    json_path = out / f"{stem}.json"
    json_path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    text = markdown(results, machine, run)
    if failures:
        text += "\n## Failed cases\n\n" + "\n".join(f"- {c}: {m}" for c, m in failures.items())
        text += "\n"
    md_path = out / f"{stem}.md"
    md_path.write_text(text)
    return json_path, md_path

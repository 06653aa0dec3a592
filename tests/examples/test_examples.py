"""Every example runs, as plain Python and under ``tracer run`` with no code change."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support import cmr_json, run_python

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_plain_and_traced(tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    """Run an example as plain Python (tracing off even where it imports the tracer), then under
    ``tracer run``: both succeed with the same stdout. Returns the traced run."""
    example = str(EXAMPLES / name)
    plain = run_python(tmp_path, example, INVOSEQ_ENABLED="0")
    traced = run_python(tmp_path, "-m", "tracer", "run", example)
    assert plain.returncode == 0, plain.stderr
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout
    return traced


def test_shop_runs_plain_and_traced_with_the_same_output(tmp_path: Path) -> None:
    traced = run_plain_and_traced(tmp_path, "shop.py")
    assert "payment failed" in traced.stdout
    assert "3 sequences in this run" in traced.stderr
    assert "handle_request" in traced.stderr
    summaries = cmr_json(tmp_path / "cmr.sqlite", "ls")
    assert [s["root"] for s in summaries] == ["__main__.handle_request"] * 3
    assert all(s["status"] == "complete" for s in summaries)
    declined = cmr_json(tmp_path / "cmr.sqlite", "show", summaries[1]["seq"])["root"]
    charge = [c for c in declined["children"] if c["name"] == "__main__.charge_card"]
    assert [(c["status"], c["error"]) for c in charge] == [("error", "CardDeclinedError")]


def test_threads_example_is_one_sequence_across_the_pool(tmp_path: Path) -> None:
    traced = run_plain_and_traced(tmp_path, "threads.py")
    [summary] = cmr_json(tmp_path / "cmr.sqlite", "ls")
    assert summary["threads"] == 4
    search = cmr_json(tmp_path / "cmr.sqlite", "show", summary["seq"])["root"]["children"][0]
    shards = [c for c in search["children"] if c["name"] == "__main__.query_shard"]
    assert len(shards) == 4
    assert {c["handoff"]["kind"] for c in shards} == {"thread"}
    assert {c["thread"]["name"].startswith("ThreadPoolExecutor") for c in shards} == {True}
    assert "queued" in traced.stderr


def test_async_example_puts_each_task_under_the_handler(tmp_path: Path) -> None:
    traced = run_plain_and_traced(tmp_path, "async_fetch.py")
    assert traced.stdout == "300\n"
    [summary] = cmr_json(tmp_path / "cmr.sqlite", "ls")
    root = cmr_json(tmp_path / "cmr.sqlite", "show", summary["seq"])["root"]
    kinds = [(c["name"], (c["handoff"] or {}).get("kind")) for c in root["children"]]
    assert kinds == [("__main__.fetch", "task")] * 3 + [("__main__.parse", "thread")]


def test_services_example_is_one_tree_through_both_processes(tmp_path: Path) -> None:
    traced = run_plain_and_traced(tmp_path, "services.py")
    assert traced.stdout == "available: apple, mug\n"
    [summary] = cmr_json(tmp_path / "cmr.sqlite", "ls")
    assert summary["processes"] == 2
    root = cmr_json(tmp_path / "cmr.sqlite", "show", summary["seq"])["root"]
    assert root["name"] == "__main__.checkout"
    calls = root["children"]
    assert [c["name"] for c in calls] == ["__main__.check_stock"] * 3
    lookups = [c["children"][0] for c in calls]
    assert {(n["name"], n["handoff"]["kind"]) for n in lookups} == {("__main__.lookup", "remote")}
    assert {n["process"]["pid"] for n in lookups} != {root["process"]["pid"]}

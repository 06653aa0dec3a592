"""Every example runs, as plain Python and under ``tracer run`` with no code change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import cmr_json

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_DB=str(tmp_path / "cmr.sqlite"), NO_COLOR="1")
    return subprocess.run(
        [sys.executable, *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_shop_runs_plain_and_traced_with_the_same_output(tmp_path: Path) -> None:
    shop = str(EXAMPLES / "shop.py")
    plain = run(tmp_path, shop)
    traced = run(tmp_path, "-m", "tracer", "run", shop)
    assert plain.returncode == 0, plain.stderr
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout
    assert "payment failed" in plain.stdout
    assert "3 sequences in this run" in traced.stderr
    assert "handle_request" in traced.stderr
    summaries = cmr_json(tmp_path / "cmr.sqlite", "ls")
    assert [s["root"] for s in summaries] == ["__main__.handle_request"] * 3
    assert all(s["status"] == "complete" for s in summaries)
    declined = cmr_json(tmp_path / "cmr.sqlite", "show", summaries[1]["seq"])["root"]
    charge = [c for c in declined["children"] if c["name"] == "__main__.charge_card"]
    assert [(c["status"], c["error"]) for c in charge] == [("error", "CardDeclinedError")]

"""A traced program with the stack sampler on, through a real `cmr serve`: the untraced functions
it spends its time in show up as estimated frames under the traced call they ran in, on the
thread they ran on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import cmr_json, cmr_server, run_traced, write_script

pytestmark = pytest.mark.system

APP = """
import time
from concurrent.futures import ThreadPoolExecutor
from tracer import traced

def spin(ms):
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass

def nap(ms):
    time.sleep(ms / 1000)

@traced
def work():
    spin(150)
    nap(150)

@traced
def main():
    with ThreadPoolExecutor(1) as pool:
        pool.submit(work).result()

main()
"""


def estimated(node: dict[str, Any]) -> set[str]:
    return {child["name"] for child in node["children"] if child["kind"] == "estimated"}


def test_samples_of_a_pool_worker_land_under_its_hand_off_and_profile_folds_them(
    tmp_path: Path,
) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "app.py", APP)
    with cmr_server(db) as endpoint:
        run_traced(
            script,
            endpoint,
            INVOSEQ_INSTRUMENT="1",
            INVOSEQ_SAMPLE_INTERVAL_MS="5",
            INVOSEQ_SPOOL_DIR=str(tmp_path / "spool"),
        )

    [summary] = cmr_json(db, "ls")
    root = cmr_json(db, "show", summary["seq"], "--samples")["root"]
    [work] = [child for child in root["children"] if child["kind"] == "measured"]
    assert (work["name"], work["thread"]["name"]) == ("__main__.work", "ThreadPoolExecutor-0_0")
    assert {"spin", "nap"} <= estimated(work)
    for child in work["children"]:
        assert child["frame"]["file"] == str(script)
        assert child["thread"] == work["thread"]
        assert child["samples"]["total"] >= 1
    assert root["samples"]["total"] >= work["samples"]["total"] > 0

    profile = cmr_json(db, "profile", "--method", "work", "--by-thread")
    [pool_thread] = profile["roots"]
    assert pool_thread["thread"]["name"] == "ThreadPoolExecutor-0_0"
    [profiled] = pool_thread["children"]
    assert {"spin", "nap"} <= {child["name"] for child in profiled["children"]}
    stats = cmr_json(db, "stats")
    assert stats["samples"] > 0
    assert stats["processes"][0]["sampler"]["ticks"] > 0

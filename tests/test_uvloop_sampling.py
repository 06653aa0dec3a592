"""A loop that iterates in C (uvloop) is sampled while it waits, as asyncio's own is.

Two traced handlers, run by ``uvloop.run`` on a thread of their own, await 0.8 s together: no
Python frame of the loop's runs while it waits in C, so the sampler recognises the loop by
``asyncio.Runner.run`` being its thread's innermost frame (``tracer/_sampling/active.py``), and the
repository places those samples under the call the waiting tasks run under
(``cmr/views/samples/placement.py``), as it places asyncio's ``_run_once``. On the main thread with
the C accelerator (which samples itself between bytecodes) the wait is not seen: docs/guide.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import cmr_json, cmr_server, run_traced, write_script

pytestmark = pytest.mark.system

WORKLOAD = """
import asyncio
import json
import threading
import time

import tracer
import uvloop

@tracer.traced
async def handler():
    started = time.perf_counter_ns()
    await asyncio.sleep(0.8)
    return time.perf_counter_ns() - started

@tracer.traced
async def handle():
    waited = await asyncio.gather(handler(), handler())
    print(json.dumps({"waited": min(waited)}))

loop_thread = threading.Thread(target=uvloop.run, args=(handle(),), name="loop")
loop_thread.start()
loop_thread.join()
"""


def test_a_uvloop_wait_is_sampled_under_the_call_its_tasks_run_under(tmp_path: Path) -> None:
    pytest.importorskip("uvloop")
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "workload.py", WORKLOAD)
    with cmr_server(db) as endpoint:
        result = run_traced(script, endpoint)
    assert "internal tracer error" not in result.stderr, result.stderr
    waited = json.loads(result.stdout)["waited"]
    [summary] = cmr_json(db, "ls")
    root = cmr_json(db, "show", summary["seq"], "--samples")["root"]
    assert root["name"] == "__main__.handle"
    children: list[dict[str, Any]] = root["children"]
    loop = [c for c in children if c["kind"] == "estimated" and c["name"] == "Runner.run"]
    assert loop, [(c["kind"], c["name"]) for c in children]
    # The wait is the loop's: most of it sampled there (the sampler's first look at the loop's
    # thread may come ten intervals late, while only the main thread had recorded, and any tick
    # later on a busy machine: hence a wait of 0.8 s and a bound of half),
    # not guessed onto one of the two handlers (only the moments one alone was still waiting go
    # under it).
    assert loop[0]["duration_ns"] >= waited // 2, (loop[0]["duration_ns"], waited)
    handlers = [c for c in children if c["name"] == "__main__.handler"]
    assert len(handlers) == 2
    under_handlers = sum(e["duration_ns"] for h in handlers for e in h["children"])
    assert under_handlers < waited // 10, (under_handlers, waited)

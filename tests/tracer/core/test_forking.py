"""The tracer's one fork handler (``tracer._core.forking``): a real fork runs each loaded
module's step in the stated order, whatever order they were named in, and a failing step is
reported without keeping the others from running."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.support import run_program
from tracer._core import forking

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


# Each fork happens in a fresh interpreter: the test process holds other tests' threads and
# fork handlers (gRPC's among them), and a child forked beside those may hang in them.
FORK = """
import json, os, sys
from tracer._core import forking

record, reported = [], []
sys.unraisablehook = lambda args: reported.append(args.err_msg)
forking._steps.clear()
{steps}
read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:  # the child: report what it recorded and leave at once
    try:
        os.write(write_end, json.dumps(record).encode())
    finally:
        os._exit(0)
os.close(write_end)
with os.fdopen(read_end, "rb") as pipe:
    child = json.loads(pipe.read())
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps({{"child": child, "parent": record, "reported": reported, "status": status}}))
"""


def forked(steps: str) -> dict[str, list[str] | int]:
    """Name ``steps`` in a fresh interpreter, fork once, and return what the child recorded,
    what the parent recorded, the errors reported and the child's exit status."""
    command = [sys.executable, "-c", FORK.format(steps=steps)]
    done = run_program(command, timeout_s=60)  # a hung child is killed with its group
    assert done.returncode == 0, done.stderr
    report: dict[str, list[str] | int] = json.loads(done.stdout)
    assert report["status"] == 0
    return report


def test_a_fork_runs_the_steps_in_the_stated_order_whatever_order_they_were_named_in() -> None:
    report = forked(
        """
for name in ("processes", "runtime", "budget", "signals"):  # not ORDER's order
    def step(phase, name=name):
        record.append(f"{phase} {name}")
    forking.on_fork(
        name,
        before=lambda step=step: step("before"),
        in_parent=lambda step=step: step("parent"),
        in_child=lambda step=step: step("child"),
    )
"""
    )
    before = ["before processes", "before signals", "before runtime", "before budget"]
    assert report["child"] == [
        *before,
        *["child budget", "child runtime", "child signals", "child processes"],
    ]
    parent = ["parent budget", "parent runtime", "parent signals", "parent processes"]
    assert report["parent"] == [*before, *parent]


def test_a_failing_step_is_reported_and_the_next_steps_still_run() -> None:
    report = forked(
        """
def broken():
    raise RuntimeError("a step that fails")
forking.on_fork("budget", in_parent=broken)
forking.on_fork("recorder", in_parent=lambda: record.append("recorder"))
"""
    )
    assert report["parent"] == ["recorder"]
    assert report["reported"] == ["Exception ignored in the tracer's fork step 'budget'"]


def test_a_step_must_be_one_the_order_names() -> None:
    with pytest.raises(ValueError, match="no fork step 'elsewhere'"):
        forking.on_fork("elsewhere", in_child=lambda: None)


def test_every_module_that_loaded_named_its_step() -> None:
    """The tracer's modules loaded by the test process all named theirs (none kept an
    ``os.register_at_fork`` of its own)."""
    import tracer._signals  # noqa: F401 - loaded by a sender's start: loaded here

    assert {"budget", "recorder", "ids", "adoption", "patching", "runtime", "signals"} <= set(
        forking._steps
    )

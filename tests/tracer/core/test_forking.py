"""The tracer's one fork handler (``tracer._core.forking``): a real fork runs each loaded
module's step in the stated order, whatever order they were named in, and a failing step is
reported without keeping the others from running."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tracer._core import forking

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.fixture(name="steps")
def fixture_steps() -> Iterator[None]:
    """The real steps of the modules the test process loaded, put back after the test."""
    kept = dict(forking._steps)
    yield
    forking._steps.clear()
    forking._steps.update(kept)


def forked(record: list[str]) -> list[str]:
    """Fork, and return what the child recorded (written back through a pipe) after the
    parent's own record of the fork."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        try:
            os.write(write_end, ",".join(record).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child = pipe.read().decode().split(",")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return child


def test_a_fork_runs_the_steps_in_the_stated_order_whatever_order_they_were_named_in(
    steps: None,
) -> None:
    record: list[str] = []
    forking._steps.clear()
    for name in ("processes", "runtime", "budget", "signals"):  # not ORDER's order

        def step(phase: str, name: str = name) -> None:
            record.append(f"{phase} {name}")

        forking.on_fork(
            name,
            before=lambda step=step: step("before"),
            in_parent=lambda step=step: step("parent"),
            in_child=lambda step=step: step("child"),
        )
    child = forked(record)
    before = ["before processes", "before signals", "before runtime", "before budget"]
    assert child == [*before, "child budget", "child runtime", "child signals", "child processes"]
    parent = ["parent budget", "parent runtime", "parent signals", "parent processes"]
    assert record == [*before, *parent]


def test_a_failing_step_is_reported_and_the_next_steps_still_run(
    steps: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    record: list[str] = []
    reported: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: reported.append(args.err_msg))
    forking._steps.clear()

    def broken() -> None:
        raise RuntimeError("a step that fails")

    forking.on_fork("budget", in_parent=broken)
    forking.on_fork("recorder", in_parent=lambda: record.append("recorder"))
    forked(record)
    assert record == ["recorder"]
    assert reported == ["Exception ignored in the tracer's fork step 'budget'"]


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

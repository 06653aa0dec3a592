"""When the SIGTERM handler is installed and taken away (tracer/_signals.py), in this process.

What the handler does when SIGTERM comes is tested with real processes in
tests/reliability/test_sigterm.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

import tracer
from tests.support import run_python, wait_for
from tracer import _signals as signals
from tracer.config import resolve
from tracer.testing import capture


@pytest.fixture(autouse=True)
def _sigterm_restored() -> Iterator[None]:
    """Whatever a test does, SIGTERM's handler is put back as it was (SIG_DFL under pytest)."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        tracer.shutdown(timeout_s=5)
        signal.signal(signal.SIGTERM, before)
    assert not signals.watching(), "the SIGTERM watchdog was left running"
    assert signal.set_wakeup_fd(-1) == -1, "a signal wakeup fd was left set"
    sigterm = sys.modules.get("tracer._sigterm")
    assert sigterm is None or not sigterm.hooked(), "SIGTERM's OS-level handler was left ours"


def theirs(signum: int, frame: FrameType | None) -> None:
    """A program's own handler (never called here)."""


def test_the_tracer_installs_its_handler_where_sigterm_is_at_its_default() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with capture():
        assert signals.installed()
        assert signals.watching()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # shutdown() put it back
    assert not signals.watching()


def test_the_signal_wakeup_fd_is_never_taken() -> None:
    """It is the process's: asyncio and trio set their own, and trio refuses to start where it
    is taken. With none set, the tracer sets none; a program's stays the program's."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with capture():
        assert signals.installed()
        assert signal.set_wakeup_fd(-1) == -1
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd)
    try:
        with capture():
            assert signals.installed()
            assert signal.set_wakeup_fd(write_fd) == write_fd  # still theirs
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.set_wakeup_fd(write_fd) == write_fd
    finally:
        signal.set_wakeup_fd(-1)
        os.close(read_fd)
        os.close(write_fd)


def test_sigterm_wakes_the_watchdog_through_a_pipe_of_its_own_under_cpythons_handler() -> None:
    """``tracer/_sigterm.c`` sits over CPython's handler while the watchdog runs, and leaves it
    when the tracer stops or the program installs a handler of its own."""
    _sigterm = pytest.importorskip("tracer._sigterm", reason="built with a compiler")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with capture():
        assert signals.watching()
        assert _sigterm.hooked()
        signal.signal(signal.SIGTERM, theirs)  # the program's, installed after: it replaces ours
        assert not _sigterm.hooked()
        assert signal.getsignal(signal.SIGTERM) is theirs
    assert signal.getsignal(signal.SIGTERM) is theirs  # shutdown() left the program's in place
    assert not _sigterm.hooked()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    assert not _sigterm.hook(1)  # nothing of CPython's to go over: nothing installed


@pytest.mark.parametrize("setting", [{"enabled": False}, {"flush_on_sigterm": False}])
def test_configure_can_take_the_handler_away(setting: dict[str, bool]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with capture():
        assert signals.installed()
        tracer.configure(**setting)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        tracer.configure()
        assert signals.installed()


def test_the_environment_can_turn_the_flush_on_sigterm_off() -> None:
    assert resolve({}, {}).flush_on_sigterm is True
    assert resolve({}, {"INVOSEQ_FLUSH_ON_SIGTERM": "0"}).flush_on_sigterm is False
    environment = {"INVOSEQ_FLUSH_ON_SIGTERM": "0"}
    assert resolve({"flush_on_sigterm": True}, environment).flush_on_sigterm is True


@pytest.mark.parametrize("handler", [theirs, signal.SIG_IGN], ids=["handler", "SIG_IGN"])
def test_a_handler_of_the_program_installed_before_is_kept(handler: object) -> None:
    signal.signal(signal.SIGTERM, handler)  # type: ignore[arg-type]
    with capture():
        assert signal.getsignal(signal.SIGTERM) is handler
    assert signal.getsignal(signal.SIGTERM) is handler


def test_a_handler_of_the_program_installed_after_replaces_ours_and_stays() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with capture():
        assert signals.installed()
        signal.signal(signal.SIGTERM, theirs)
        tracer.configure()  # a new sender does not take SIGTERM back
        assert signal.getsignal(signal.SIGTERM) is theirs
    assert signal.getsignal(signal.SIGTERM) is theirs


def test_sigterm_put_back_at_its_default_by_the_program_gets_the_handler_again() -> None:
    """A server that handles SIGTERM while it stops, then puts the default back and raises
    SIGTERM again to die by it (uvicorn's workers): the tracer's handler is over the default
    again, so that raise flushes. ``signal.signal`` is the program's own once the tracer stops."""
    programs_own = signal.signal
    signal.signal(signal.SIGTERM, theirs)  # before the tracer starts: kept
    with capture():
        assert signal.getsignal(signal.SIGTERM) is theirs
        assert signal.signal(signal.SIGTERM, signal.SIG_DFL) is theirs  # the program's restore
        assert signals.installed()
        assert signals.watching()
        assert signal.signal(signal.SIGTERM, theirs) is signals._on_sigterm  # theirs again
        assert signal.getsignal(signal.SIGTERM) is theirs
    assert signal.getsignal(signal.SIGTERM) is theirs
    assert signal.signal is programs_own


def test_a_tracer_started_from_another_thread_installs_on_the_main_thread() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with capture():
        tracer.shutdown()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        starter = threading.Thread(target=tracer.configure)
        starter.start()
        starter.join()
        wait_for(signals.installed, timeout_s=10)  # as soon as this (main) thread runs Python
        assert signals.watching()
        stopper = threading.Thread(target=tracer.shutdown)
        stopper.start()
        stopper.join()
        wait_for(lambda: signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, timeout_s=10)
        assert not signals.watching()


FORK = """
import json, os, signal
import tracer
from tracer import _signals as signals

@tracer.traced
def work():
    pass

def state():
    return {"installed": signals.installed(), "watching": signals.watching()}

tracer.configure()
report = {"parent": state()}
child = os.fork()
if child == 0:  # SIGTERM at its default: ends the child at once, and the parent not at all
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(3)
report["untraced child"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
read_fd, write_fd = os.pipe()
child = os.fork()
if child == 0:
    seen = {"forked": state()}
    work()  # the child's tracer starts: handler and watchdog of its own
    seen["traced"] = state()
    os.write(write_fd, json.dumps(seen).encode())
    os._exit(0)
os.waitpid(child, 0)
report["traced child"] = json.loads(os.read(read_fd, 4096))
report["parent after"] = state()
print(json.dumps(report))
"""


@pytest.mark.system
def test_a_forked_child_gets_the_handler_with_its_first_traced_call(tmp_path: Path) -> None:
    """Until then it has nothing to flush, and SIGTERM ends it as if the tracer were not there
    (without waking the parent's watchdog, which shares nothing with it)."""
    script = tmp_path / "fork.py"
    script.write_text(textwrap.dedent(FORK))
    result = run_python(tmp_path, str(script), INVOSEQ_FLUSH_TIMEOUT_MS="0")
    assert result.returncode == 0, result.stderr
    ours = {"installed": True, "watching": True}
    assert json.loads(result.stdout) == {
        "parent": ours,
        "untraced child": -signal.SIGTERM,
        "traced child": {"forked": {"installed": False, "watching": False}, "traced": ours},
        "parent after": ours,
    }

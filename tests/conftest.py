"""Shared fixtures: every test leaves the tracer shut down, with no sender thread behind it, every
patched attribute as it found it and no import hook of the tracer in ``sys.meta_path`` (but the
one ``import tracer`` installs for good: ``tracer._core.imports``, waiting for OpenTelemetry),
which watches no module for the integrations any more."""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tracer
from tests import requirements
from tracer import _patching as patching
from tracer import _signals as signals
from tracer._core import budget, recorder
from tracer._patching import processes, tasks, threads

# Tests and the programs they start spool (when a repository is away) into a private directory,
# never into the user's cache, where a later run of the same program would replay them.
os.environ.setdefault("INVOSEQ_SPOOL_DIR", tempfile.mkdtemp(prefix="invoseq-test-spool-"))


def _forget_spools_of_the_dead() -> None:
    """The spool files a test's programs left as they ended (a repository that was away): the
    next test's tracer of the same program would adopt and send them (every ``python -c`` child
    and every pytest-xdist worker is the program ``-c``), a test's events in another's."""
    from tracer._shipping.spool import _alive  # the spool's own test of a writer still running

    for path in Path(os.environ["INVOSEQ_SPOOL_DIR"]).glob("*.spool"):
        pid = path.name.partition("-")[2].partition(".")[0]  # <program>-<pid>[.<n>].spool
        if pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)


def _stored(owner: Any, name: str) -> Any:
    """The attribute as its owner stores it (a class's own function, not a bound method), as
    the patches read and restore it."""
    if isinstance(owner, type) and name in owner.__dict__:
        return owner.__dict__[name]
    return getattr(owner, name)


def _label(owner: Any, name: str) -> str:
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    return f"{owner.__name__}.{name}"  # a module


#: Every attribute the patch tables replace, with the object found there before any test ran.
def _core_patches() -> list[tuple[Any, str, Any]]:
    """The patch tables, with the modules their hooks wait for imported here."""
    found = list(threads.PATCHES)
    for table in (threads.HOOKS, tasks.HOOKS, processes.HOOKS):
        for module_name, hook in table.items():
            found += hook(importlib.import_module(module_name))
    return found


PATCHED = [(owner, name) for owner, name, _ in _core_patches()]
ORIGINALS = {(owner, name): _stored(owner, name) for owner, name in PATCHED}


#: Folders whose every test starts real processes: each of their tests is marked ``system``.
SYSTEM_FOLDERS = ("reliability", "processes", "examples", "integrations", "queues")


def pytest_configure(config: pytest.Config) -> None:
    requirements.required()  # a misspelt INVOSEQ_REQUIRE stops the run before any test


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        if (
            item.path.is_relative_to(tests)
            and item.path.relative_to(tests).parts[0] in SYSTEM_FOLDERS
        ):
            item.add_marker(pytest.mark.system)


def pytest_report_header(config: pytest.Config) -> str:
    listed = ", ".join(sorted(requirements.required()))
    if not listed:
        return f"{requirements.ENV_REQUIRE} is empty: tests that need what is missing skip"
    return f"{requirements.ENV_REQUIRE}={listed}: tests that need them fail when they are missing"


def _where(threads: list[threading.Thread]) -> str:
    """Each thread's name and where it is stuck: what a failure in CI has to show."""
    frames = sys._current_frames()
    return "\n".join(
        f"{t.name}:\n" + "".join(traceback.format_stack(frames[t.ident]))
        if t.ident in frames
        else t.name
        for t in threads
    )


@pytest.fixture(autouse=True)
def _no_tracer_leaks() -> Iterator[None]:
    yield
    tracer.shutdown(timeout_s=5)  # shutting down is what matters here, not its acknowledgement
    # What was recorded after the test's tracer shut down (the End of a call that outlived it)
    # stays in its thread's buffer, and the next test's tracer would send it into its capture.
    left = recorder.drain()
    budget.hold(-left.events * budget.EVENT_BYTES)
    _forget_spools_of_the_dead()
    leaked = [t for t in threading.enumerate() if t.name.startswith("invoseq-")]
    assert not leaked, f"tracer threads left running: {_where(leaked)}"
    # The SIGTERM watchdog is a _thread thread, which threading.enumerate() does not list.
    assert not signals.watching(), "the SIGTERM watchdog is still running"
    assert not signals.installed(), "the tracer's SIGTERM handler is still installed"
    assert not patching.instrumented(), "a test left the tracer's patches installed"
    changed = [
        _label(owner, name)
        for owner, name in PATCHED
        if _stored(owner, name) is not ORIGINALS[owner, name]
    ]
    assert not changed, f"patched attributes not restored: {changed}"
    hooks = [
        f
        for f in sys.meta_path
        if type(f).__module__.partition(".")[0] == "tracer"
        and type(f).__module__ != "tracer._core.imports"
    ]
    assert not hooks, f"tracer import hooks left in sys.meta_path: {hooks}"
    watched = sys.modules["tracer._core.imports"]._watching
    assert not watched, f"modules still watched for the integrations: {sorted(watched)}"

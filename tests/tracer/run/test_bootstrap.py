"""``tracer.run.bootstrap`` in this process: the variables ``tracer run`` hands its children, and
``start()``/``uninstall()`` (the children themselves: tests/processes/test_run_children.py)."""

from __future__ import annotations

import multiprocessing.spawn
import os
import runpy

from tracer import _patching as patching
from tracer._core import recorder
from tracer.config import Config, environment, resolve
from tracer.run import autowrap, bootstrap

OURS = bootstrap.DIRECTORY


def test_environment_puts_the_bootstrap_first_and_keeps_the_users_path() -> None:
    user = os.pathsep.join(["/a", OURS, "/b"])
    assert bootstrap.environment(("main", "work.*"), {"PYTHONPATH": user}) == {
        "INVOSEQ_RUN_INCLUDE": "main,work.*",
        "PYTHONPATH": os.pathsep.join([OURS, "/a", "/b"]),
    }
    assert bootstrap.environment(("main",), {})["PYTHONPATH"] == OURS


def test_inherit_fills_an_environment_of_its_own_unless_it_says_otherwise() -> None:
    parent = {"INVOSEQ_RUN_INCLUDE": "work", "PYTHONPATH": OURS}
    child = {"PYTHONPATH": "/mine"}
    bootstrap.inherit(child, parent)
    assert child == {"INVOSEQ_RUN_INCLUDE": "work", "PYTHONPATH": os.pathsep.join([OURS, "/mine"])}
    refused = {"INVOSEQ_RUN_INCLUDE": "", "PYTHONPATH": "/mine"}
    bootstrap.inherit(refused, parent)
    assert refused == {"INVOSEQ_RUN_INCLUDE": "", "PYTHONPATH": "/mine"}
    untouched = {"PATH": "/bin"}
    bootstrap.inherit(untouched, {})  # this process was not started by tracer run
    assert untouched == {"PATH": "/bin"}


def test_settings_travel_through_the_environment_unchanged() -> None:
    assert environment(Config()) == {}
    config = Config(
        endpoint="ipc:///tmp/x.sock",
        instrument=True,
        sample_interval_ms=0,
        sample_mode="cpu",
        sample_only_active=False,
        curve_server_key="/k/server.key",
        curve_client_key="/k/client.key_secret",
        spool_bytes=0,
    )
    variables = environment(config)
    assert variables["INVOSEQ_SAMPLE_ONLY_ACTIVE"] == "0"
    assert variables["INVOSEQ_INSTRUMENT"] == "1"
    assert resolve({}, variables) == config


def test_start_installs_everything_and_uninstall_puts_it_back() -> None:
    originals = (
        multiprocessing.spawn._fixup_main_from_path,
        multiprocessing.spawn._fixup_main_from_name,
        runpy._run_module_as_main,  # type: ignore[attr-defined]
    )
    environ = {"INVOSEQ_RUN_INCLUDE": "work,main", "INVOSEQ_INSTRUMENT": "1"}
    try:
        assert bootstrap.start(environ)
        installed = autowrap.installed()
        assert installed is not None
        assert installed.patterns == ("work", "main")
        assert patching.instrumented()
        assert multiprocessing.spawn._fixup_main_from_path is not originals[0]
        assert runpy._run_module_as_main is not originals[2]  # type: ignore[attr-defined]
    finally:
        bootstrap.uninstall()
    assert autowrap.installed() is None
    assert not patching.instrumented()
    assert (
        multiprocessing.spawn._fixup_main_from_path,
        multiprocessing.spawn._fixup_main_from_name,
        runpy._run_module_as_main,  # type: ignore[attr-defined]
    ) == originals


def test_start_does_nothing_unless_asked() -> None:
    assert not bootstrap.start({"INVOSEQ_INSTRUMENT": "1"})
    assert not bootstrap.start({"INVOSEQ_RUN_INCLUDE": ""})
    assert autowrap.installed() is None
    assert not patching.instrumented()


def test_a_failing_start_is_counted_and_leaves_nothing_installed() -> None:
    errors = recorder.internal_errors()
    assert not bootstrap.start({"INVOSEQ_RUN_INCLUDE": "a/b.py", "INVOSEQ_INSTRUMENT": "1"})
    assert recorder.internal_errors() == errors + 1
    assert autowrap.installed() is None
    assert not patching.instrumented()

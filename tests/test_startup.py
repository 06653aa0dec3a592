"""Start-up (issue 33): what importing ``tracer`` and running ``cmr`` load, each in a fresh
interpreter, and the one line a command prints when it needs an extra that is not installed.
How long they take is measured by ``python -m benchmarks --only startup``, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Modules of the tracer that ``cmr`` may load: none (the protocol is ``invoseq.wire``).
NOT_FOR_TRACER = ("zmq", "opentelemetry", "asyncio", "multiprocessing", "ssl", "concurrent")


def _loaded(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON line, which is returned."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_cmr_loads_no_module_of_the_tracer() -> None:
    """Every command's module, the store, the server and the views: nothing of ``tracer``."""
    found = _loaded(
        """
        import json, sys
        from cmr.cli.main import build_parser
        build_parser()  # every command, in full
        import cmr.server.server, cmr.server.ingest, cmr.store.sqlite.store, cmr.views.pipeline
        print(json.dumps({"tracer": sorted(m for m in sys.modules if m.startswith("tracer"))}))
        """
    )
    assert found["tracer"] == []


def test_cmr_help_builds_no_command() -> None:
    found = _loaded(
        """
        import contextlib, io, json, sys
        from cmr.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["--help"])
        prefixes = ("cmr.", "msgspec", "zmq", "shutil", "typing")
        loaded = sorted(m for m in sys.modules if m.startswith(prefixes))
        print(json.dumps({"code": code, "loaded": loaded}))
        """
    )
    assert found["code"] == 0
    assert set(found["loaded"]) <= {  # type: ignore[arg-type]
        "cmr.ages",
        "cmr.cli",
        "cmr.cli.common",
        "cmr.cli.main",
        "cmr.defaults",
    }


#: What ``import tracer`` adds to a bare interpreter with the C accelerator: the hot path, and of
#: the standard library only these (no typing, threading, weakref or random).
#: contextlib: the context helpers' (3.11 and 3.13 load it before any program; 3.12 does not);
#: gc, built into the interpreter (40 us): on 3.11 the tracer learns when a collection runs
#: (tracer._core.context, "No write inside a collection" in docs/architecture.md)
HOT_PATH_STDLIB = {"_contextvars", "contextvars", "_random", "atexit", "contextlib", "gc"}
HOT_PATH = {
    "invoseq",
    "invoseq.events",
    "tracer",
    "tracer._patching",
    "tracer._runtime",
    *(
        f"tracer._core{name}"
        for name in (
            "",
            "._speedups",
            ".accel",
            ".adoption",
            ".budget",
            ".clock",
            ".codes",
            ".context",
            ".decorator",
            ".forking",
            ".wrapper_frames",
            ".ids",
            ".imports",
            ".lifecycle",
            ".log",
            ".recorder",
            ".stack",
            ".traced",
        )
    ),
}


def test_cmr_ls_loads_the_read_side_alone(tmp_path: Path) -> None:
    """A listing opens the read side of the store (``SQLiteReader``): no msgspec nor protocol,
    no ingest machinery, no record a listing does not print, no typing, and (its help formatter
    reads the terminal's width itself) no shutil."""
    from cmr.store import open_store

    db = tmp_path / "cmr.sqlite"
    open_store(str(db)).close()
    found = _loaded(
        f"""
        import contextlib, io, sys
        from cmr.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["--db", {str(db)!r}, "ls"])
        modules = sorted(sys.modules)
        import json
        print(json.dumps({{"code": code, "modules": modules}}))
        """
    )
    assert found["code"] == 0
    modules: list[str] = found["modules"]  # type: ignore[assignment]
    never = ("msgspec", "invoseq.wire", "shutil", "threading", "json", "typing")
    assert [m for m in modules if m.startswith(never)] == []
    store = {m for m in modules if m.startswith("cmr.store.")}
    assert store == {
        "cmr.store.rules",
        "cmr.store.block_pages",
        "cmr.store.base",
        "cmr.store.listing",
        "cmr.store.listing_sql",
        "cmr.store.migrations",
        "cmr.store.sqlite",
        "cmr.store.sqlite.connect",
        "cmr.store.sqlite.blocks",
        "cmr.store.sqlite.read",
        "cmr.store.sqlite.reader",
        "cmr.store.sqlite.schema",
        "cmr.store.sqlite.statements",
        "cmr.store.sqlite.summaries",
        "cmr.store.summaries",
    }


def test_import_tracer_loads_only_the_hot_path_and_starts_nothing() -> None:
    found = _loaded(
        """
        import json, sys
        before = set(sys.modules)
        import tracer

        imported = sorted(set(sys.modules) - before)
        import threading

        @tracer.traced
        def f():
            return 1

        print(json.dumps({
            "imported": imported,
            "modules": sorted(sys.modules),
            "threads": [t.name for t in threading.enumerate()],
        }))
        """
    )
    modules: list[str] = found["modules"]  # type: ignore[assignment]
    heavy = [m for m in modules if m.partition(".")[0] in NOT_FOR_TRACER]
    assert heavy == []
    # Nor, until a function is decorated, what only the sender, the settings, a message or the
    # code rewriting of 3.11 need.
    imported: list[str] = found["imported"]  # type: ignore[assignment]
    later = ["msgspec", "logging", "inspect", "dataclasses", "tracer.config", "socket", "typing"]
    later += ["random", "tracer.propagation", "tracer._tracecontext", "tracer._core.wrapper_shapes"]
    if os.environ.get("INVOSEQ_PURE") == "1":
        later.remove("logging")  # the accelerator says, at debug level, that it is left out
    if "tracer._core._speedups" in imported:
        assert sorted(set(imported) - HOT_PATH - HOT_PATH_STDLIB) == []
    assert [m for m in imported if m in later] == []
    # The sender and the whole sampler package (tracer._sampling.sampler and its parts).
    sender_and_sampler = ("tracer._shipping", "tracer._sampling")
    assert [m for m in modules if m.startswith(sender_and_sampler)] == []
    assert found["threads"] == ["MainThread"]


def test_the_patches_wait_for_the_modules_they_patch() -> None:
    """``instrument()`` imports no asyncio nor multiprocessing; importing them later patches
    them (and a sequence follows a task)."""
    found = _loaded(
        """
        import json, sys
        import tracer
        tracer.instrument()
        names = ("asyncio", "multiprocessing", "subprocess", "concurrent.futures")
        before = sorted(m for m in names if m in sys.modules)
        import asyncio, multiprocessing.process
        start = multiprocessing.process.BaseProcess.start
        print(json.dumps({
            "before": before,
            "task": asyncio.Task is asyncio.tasks.Task,
            "subclass": asyncio.Task.__mro__[1].__name__,
            "start": start.__module__,
        }))
        tracer.uninstrument()
        """
    )
    assert found["before"] == []
    assert found["task"] is True
    assert found["subclass"] == "Task"  # the traced subclass of asyncio's own Task
    assert found["start"] == "tracer._patching.processes"


@pytest.mark.parametrize(
    ("blocked", "command", "extra"),
    [
        ("psycopg", ["--db", "postgresql://127.0.0.1:1/none", "ls"], "postgres"),
        (
            "opentelemetry.sdk",
            ["forward", "--otlp-endpoint", "http://127.0.0.1:1", "--all"],
            "otlp",
        ),
    ],
)
def test_a_command_needing_a_missing_extra_names_it_in_one_line(
    tmp_path: Path, blocked: str, command: list[str], extra: str
) -> None:
    wrapper = tmp_path / "without.py"
    wrapper.write_text(
        f"import sys\nsys.modules[{blocked!r}] = None  # as if the extra were not installed\n"
        "from cmr.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, str(wrapper), *command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"INVOSEQ_DB": str(tmp_path / "empty.sqlite"), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"pip install 'invoseq[{extra}]'" in done.stderr


def test_tracer_otel_without_the_sdk_says_which_extra() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['opentelemetry.sdk'] = None\nimport tracer.otel",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 1
    assert "pip install 'invoseq[otlp]'" in done.stderr.splitlines()[-1]


def test_tracer_version_and_help_read_no_metadata_nor_integration() -> None:
    """``tracer --version`` and ``--help`` load no package metadata (the version is
    ``invoseq.__version__``) and no integration."""
    found = _loaded(
        """
        import contextlib, io, json, sys
        from tracer.run.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as out:
            codes = [main(["--version"]), main(["--help"])]
        never = ("importlib.metadata", "tracer._patching.integrations")
        print(json.dumps({"codes": codes, "out": out.getvalue(),
                          "loaded": sorted(m for m in sys.modules if m.startswith(never))}))
        """
    )
    assert found["codes"] == [0, 0]
    assert found["loaded"] == []
    assert "invoseq" in found["out"]  # type: ignore[operator]


def test_the_integrations_table_names_the_modules_each_integration_hooks() -> None:
    import importlib

    from tracer._patching import integrations

    for name in integrations.INTEGRATIONS:
        module = importlib.import_module(f"{integrations.__name__}.{name}")
        assert integrations.WATCHES[name] == tuple(module.HOOKS), name


def test_what_the_hot_path_keeps_without_its_module_matches_it() -> None:
    """Constants kept where ``import tracer`` reads them without loading their source."""
    import inspect

    from tracer import _runtime, propagation
    from tracer._core import budget, codes
    from tracer.config import Config

    for name in ("CO_VARARGS", "CO_VARKEYWORDS", "CO_GENERATOR", "CO_COROUTINE"):
        assert getattr(codes, name) == getattr(inspect, name), name
    assert codes.CO_ITERABLE_COROUTINE == inspect.CO_ITERABLE_COROUTINE
    assert codes.CO_ASYNC_GENERATOR == inspect.CO_ASYNC_GENERATOR
    assert Config().max_buffered_bytes == budget.DEFAULT_BOUND
    carried = (propagation.TRACEPARENT.upper(), propagation.TRACESTATE.upper())
    assert carried == _runtime._CARRIED


def test_a_process_that_traced_nothing_loads_nothing_more_at_exit() -> None:
    found = _loaded(
        """
        import atexit, json, sys

        # Registered first, so it runs last: after the tracer's own shutdown.
        atexit.register(lambda: print(json.dumps({"config": "tracer.config" in sys.modules})))
        import tracer
        """
    )
    assert found["config"] is False


def test_sending_and_serving_load_no_asyncio(tmp_path: Path) -> None:
    """A traced process that sends to a repository, and ``cmr serve``'s server, watch their
    sockets' handshakes without ``zmq.utils.monitor``, which loads ``asyncio`` (14-22 ms) into a
    program that may never use it."""
    endpoint = f"ipc://{tmp_path / 'none.sock'}"
    found = _loaded(
        f"""
        import json, sys
        import tracer
        tracer.configure(endpoint={endpoint!r}, flush_timeout_ms=100, sample_interval_ms=0)

        @tracer.traced
        def work():
            return 1

        work()
        tracer.flush(timeout_s=0.2)
        import cmr.server.server
        print(json.dumps({{"asyncio": "asyncio" in sys.modules,
                          "sender": "tracer._shipping.handshakes" in sys.modules}}))
        """
    )
    assert found == {"asyncio": False, "sender": True}


def test_the_propagation_loads_with_its_first_use_and_a_parents_sequence() -> None:
    """``tracer.inject`` and the rest load ``tracer.propagation`` when taken; a child started in
    a sequence (``TRACEPARENT`` in its environment) loads it at import, to continue it."""
    found = _loaded(
        """
        import json, os, sys
        import tracer
        loaded = "tracer.propagation" in sys.modules
        from tracer import SequenceContext, continue_from, extract, inject
        from tracer import propagation
        same = [inject, extract, continue_from] == [
            propagation.inject, propagation.extract, propagation.continue_from
        ]
        print(json.dumps({"loaded": loaded, "same": same}))
        """
    )
    assert found == {"loaded": False, "same": True}
    seq = "4bf92f3577b34da6a3ce929d0e0e4736"
    done = subprocess.run(
        [sys.executable, "-c", "import tracer; print(tracer.current_sequence())"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "TRACEPARENT": f"00-{seq}-00f067aa0ba902b7-01"},
        check=True,
    )
    assert done.stdout.strip() == seq

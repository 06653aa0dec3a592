"""``tracer info``, ``tracer --version``, ``cmr --version`` and ``tracer run
--list-integrations``: what a user asks to learn what is running, each in a real subprocess.

The integrations' states come from a real program under ``tracer run``: Flask imported (active),
requests imported but disabled through OpenTelemetry's variable, a tiny real distribution
``httpx`` 0.1.0 (its own dist-info on PYTHONPATH, ahead of the real one) outside the versions
the httpx integration supports, and Django never imported.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tracer._patching.integrations import INTEGRATIONS

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[3]


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("INVOSEQ_", "OTEL_")) or k == "INVOSEQ_PURE"
    }
    environ.update(env)
    environ.setdefault("INVOSEQ_DB", str(tmp_path / "cmr.sqlite"))
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=environ,
        check=False,
    )


def _states(text: str) -> dict[str, tuple[str, str]]:
    """Integration name -> (state, why), from the lines ``tracer`` prints."""
    found = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and line.startswith("  ") and words[0] in INTEGRATIONS:
            rest = line.strip()[len(words[0]) :].strip()
            state = next(
                s
                for s in ("unsupported version", "not imported", "active", "disabled", "failed")
                if rest.startswith(s)
            )
            found[words[0]] = (state, rest[len(state) :].strip())
    return found


def _old_httpx(tmp_path: Path) -> Path:
    """A real distribution ``httpx`` 0.1.0: a package and its dist-info METADATA."""
    lib = tmp_path / "lib"
    (lib / "httpx").mkdir(parents=True)
    (lib / "httpx" / "__init__.py").write_text("VERSION = '0.1.0'\n")
    info = lib / "httpx-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: httpx\nVersion: 0.1.0\n")
    return lib


def test_list_integrations_says_active_not_imported_disabled_and_unsupported(
    tmp_path: Path,
) -> None:
    lib = _old_httpx(tmp_path)
    (tmp_path / "app.py").write_text(
        "import flask, requests, httpx\nprint('served', httpx.VERSION)\n"
    )
    done = _run(
        tmp_path,
        "-m",
        "tracer",
        "run",
        "--no-report",
        "--list-integrations",
        "app.py",
        PYTHONPATH=str(lib),
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="requests,sqlalchemy",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "served 0.1.0\n"  # the program's output, untouched
    states = _states(done.stderr)
    assert states["flask"] == ("active", "patched at the import of flask.app")
    assert states["requests"] == ("disabled", "by OTEL_PYTHON_DISABLED_INSTRUMENTATIONS")
    assert states["httpx"] == (
        "unsupported version",
        "httpx 0.1.0 is installed; supported: >=0.24: not patched",
    )
    assert states["django"][0] == "not imported"
    assert list(states) == list(INTEGRATIONS)  # every one, in the registry's order
    # said once in the log, as the program imported it
    assert done.stderr.count("integration httpx not patched: httpx 0.1.0 is installed") == 1


def test_an_unsupported_library_is_left_unpatched(tmp_path: Path) -> None:
    """The old httpx's module is the program's own, whatever the httpx integration expects."""
    lib = _old_httpx(tmp_path)
    code = (
        "import tracer; tracer.instrument(); import httpx, sys\n"
        "print(sorted(vars(httpx)) == sorted(['VERSION', *[k for k in vars(httpx) "
        "if k.startswith('__')]]))\n"
        "from tracer._patching.integrations import report\n"
        "print([s.state for s in report() if s.name == 'httpx'])\n"
    )
    done = _run(tmp_path, "-c", code, PYTHONPATH=str(lib))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True", "['unsupported version']"]


def test_tracer_info_says_version_python_implementation_repository_and_integrations(
    tmp_path: Path,
) -> None:
    endpoint = "tcp://10.0.0.1:7311"
    done = _run(
        tmp_path,
        "-m",
        "tracer",
        "info",
        INVOSEQ_PURE="1",
        INVOSEQ_ENDPOINT=endpoint,
        INVOSEQ_DISABLED_INTEGRATIONS="django",
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines()[:4])
    assert lines["tracer"] == f"invoseq {importlib.metadata.version('invoseq')}"
    assert lines["python"].startswith(f"CPython {sys.version.split()[0]} ")
    assert lines["implementation"] == "pure Python (INVOSEQ_PURE=1)"
    assert lines["repository"] == f"{endpoint} ($INVOSEQ_ENDPOINT), under tracer run and in code"
    states = _states(done.stdout)
    assert states["django"] == ("disabled", "by INVOSEQ_DISABLED_INTEGRATIONS")
    assert states["flask"][0] == "not imported"  # tracer info imports no library


def test_tracer_info_without_an_endpoint_names_the_embedded_repositorys_file(
    tmp_path: Path,
) -> None:
    done = _run(tmp_path, "-m", "tracer", "info", "--db", "runs.sqlite")
    assert done.returncode == 0, done.stderr
    repository = [line for line in done.stdout.splitlines() if line.startswith("repository")]
    expected = f"an embedded repository, storing into {tmp_path / 'runs.sqlite'} (--db)"
    assert repository[0].endswith(expected)


def test_the_implementation_says_why_the_accelerator_did_not_load(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['tracer._core._speedups'] = None  # as if it were not built\n"
        "from tracer.run.cli import main; sys.exit(main(['--version']))\n"
    )
    done = _run(tmp_path, "-c", code, INVOSEQ_PURE="0")
    assert done.returncode == 0, done.stderr
    assert "pure Python (the C accelerator did not import: import of tracer._core._speedups" in (
        done.stdout
    )


def test_versions_name_the_installed_distribution(tmp_path: Path) -> None:
    version = importlib.metadata.version("invoseq")
    python = f"CPython {sys.version.split()[0]}"
    tracer = _run(tmp_path, "-m", "tracer", "--version")
    cmr = _run(tmp_path, "-m", "cmr", "--version")
    assert tracer.returncode == cmr.returncode == 0, tracer.stderr + cmr.stderr
    assert tracer.stdout.startswith(f"tracer (invoseq) {version}, {python}, ")
    implementation = "pure Python" if os.environ.get("INVOSEQ_PURE") == "1" else "C accelerator"
    assert implementation in tracer.stdout
    assert cmr.stdout == f"cmr (invoseq) {version}, {python}\n"


def test_list_integrations_under_gunicorn_says_what_each_forked_worker_patched(
    tmp_path: Path,
) -> None:
    """gunicorn's master imports no application; its worker, forked, imports Flask: each says
    its own states when it ends (SIGTERM to the master, gunicorn's graceful stop)."""
    from tests.processes.web_support import get, wait_until_listening
    from tests.support import free_port

    (tmp_path / "app.py").write_text(
        "from flask import Flask\napp = Flask(__name__)\n\n"
        "@app.get('/')\ndef index():\n    return 'hi'\n"
    )
    port = free_port()
    command = ["-m", "gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}", "app:app"]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("INVOSEQ_", "OTEL_"))}
    environ["INVOSEQ_DB"] = str(tmp_path / "cmr.sqlite")
    process = subprocess.Popen(
        [sys.executable, "-m", "tracer", "run", "--no-report", "--list-integrations", *command],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_until_listening(port, process, timeout_s=90)
        assert get(f"http://127.0.0.1:{port}/") == "hi"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=10) if process.returncode is None else None
    # one block per process, each headed by which process it is (the worker ends first)
    blocks = dict(
        block.split(":\n", 1) for block in stderr.split("tracer: the integrations in ")[1:]
    )
    master = _states(blocks.pop("this run"))
    [(worker_name, worker_text)] = blocks.items()
    assert worker_name.startswith("the forked process ")
    worker = _states(worker_text)
    assert worker["flask"] == ("active", "patched at the import of flask.app")
    assert worker["wsgi"][0] == master["wsgi"][0] == "active"  # the master imports the worker
    assert master["flask"][0] == "not imported"


def test_patching_a_helper_library_alone_does_not_make_an_integration_active(
    tmp_path: Path,
) -> None:
    """Starlette's integration patches anyio too: a program importing anyio alone has no
    Starlette to speak of."""
    code = (
        "import tracer; tracer.instrument(); import anyio._backends._asyncio\n"
        "from tracer._patching.integrations import report\n"
        "print({s.name: s.state for s in report()}['starlette'])\n"
        "import starlette.applications\n"
        "print({s.name: s.state for s in report()}['starlette'])\n"
    )
    done = _run(tmp_path, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["not imported", "active"]


def test_checking_a_librarys_version_imports_no_package_metadata_machinery(
    tmp_path: Path,
) -> None:
    """Django's version is read from its dist-info's name: importing Django under the tracer
    loads no importlib.metadata (tens of milliseconds), which Django itself does not load."""
    code = (
        "import sys, tracer; tracer.instrument()\n"
        "import django.core.handlers.wsgi\n"
        "from tracer._patching.integrations import report\n"
        "state = {s.name: s.state for s in report()}['django']\n"
        "print(state, 'importlib.metadata' in sys.modules)\n"
    )
    done = _run(tmp_path, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["active", "False"]

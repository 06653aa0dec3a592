"""``tracer info`` and ``tracer --version``: say what is running.

More in docs/architecture.md, "tracer/run/info.py".
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence

from cmr.defaults import DB_ENV, DEFAULT_DB_PATH
from invoseq import DEFAULT_ENDPOINT, __version__
from tracer._core import accel
from tracer.config import ENV_ENDPOINT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tracer._patching.integrations.states import State

_LABEL = 16


def python() -> str:
    name = sys.implementation.name
    return f"{'CPython' if name == 'cpython' else name} {sys.version.split()[0]}"


def implementation() -> str:
    """The hot path's implementation, and why pure Python when it is."""
    if accel.IMPLEMENTATION == "c":
        return "C accelerator (tracer._core._speedups)"
    return f"pure Python ({accel.why_pure})"


def version_line() -> str:
    """``tracer --version``."""
    return f"tracer (invoseq) {__version__}, {python()}, {implementation()}"


def repository(
    endpoint: str | None = None, db: str | None = None, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Where a traced program would send, as ``--endpoint``/``--db`` and the environment say."""
    env = os.environ if environ is None else environ
    configured = endpoint or env.get(ENV_ENDPOINT)
    if configured:
        source = "--endpoint" if endpoint else f"${ENV_ENDPOINT}"
        return [f"{configured} ({source}), under tracer run and in code"]
    path = os.path.abspath(db or env.get(DB_ENV) or DEFAULT_DB_PATH)
    source = "--db" if db else f"${DB_ENV}" if env.get(DB_ENV) else "default"
    return [
        f"tracer run: an embedded repository, storing into {path} ({source})",
        f"traced in code, not under tracer run: {DEFAULT_ENDPOINT} (default; ${ENV_ENDPOINT})",
    ]


def integrations_table(found: Sequence[State]) -> list[str]:
    """One line per integration: its name, state, and why."""
    width = max(len(state.name) for state in found) + 2
    return [f"  {s.name:<{width}}{s.state:<21}{s.why}" for s in found]


def integrations_text() -> str:
    """Each integration's state in this process (``tracer run --list-integrations``)."""
    from tracer._patching import integrations

    return "\n".join(integrations_table(integrations.report()))


def describe(endpoint: str | None = None, db: str | None = None) -> str:
    """``tracer info``'s text."""
    lines = [
        f"{'tracer':<{_LABEL}}invoseq {__version__}",
        f"{'python':<{_LABEL}}{python()} ({sys.executable})",
        f"{'implementation':<{_LABEL}}{implementation()}",
    ]
    where = repository(endpoint, db)
    lines.append(f"{'repository':<{_LABEL}}{where[0]}")
    lines.extend(" " * _LABEL + line for line in where[1:])
    lines.append('integrations    (docs/guide.md, "The integrations")')
    lines.append(integrations_text())
    return "\n".join(lines)


def main(tokens: list[str]) -> int:
    """``tracer info [--endpoint ENDPOINT] [--db PATH]``."""
    parser = argparse.ArgumentParser(
        prog="tracer info",
        description=textwrap.fill(
            "Say what is running: invoseq's version, the Python, the hot path's implementation "
            "(the C accelerator, or pure Python and why), the repository a traced program would "
            "send to as the environment (or --endpoint/--db, as 'tracer run' takes them) says, "
            "and each integration: active, not imported (patched when the program imports its "
            "library), disabled (and by which setting) or unsupported version (not patched). "
            "'tracer run --list-integrations' prints the program's own states after it ran.",
            width=96,
        ),
    )
    parser.add_argument("--endpoint", metavar="ENDPOINT", help="as 'tracer run --endpoint'")
    parser.add_argument("--db", metavar="PATH", help="as 'tracer run --db'")
    try:
        parsed = parser.parse_args(tokens)
    except SystemExit as exc:  # --help printed, or a usage error said
        return exc.code if isinstance(exc.code, int) else 0
    return say(describe(parsed.endpoint, parsed.db))


def say(text: str) -> int:
    """Print ``text``; a reader that stops early (``tracer info | head``) is its choice: 0."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # nothing more reaches the closed pipe
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0

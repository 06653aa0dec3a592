"""``tracer``'s command line: the options of ``tracer run`` and of ``tracer`` itself, the
rules their ``--help`` explains, and splitting the command line into ``tracer run``'s own options
and the program with its arguments (passed on untouched)."""

from __future__ import annotations

import argparse
import os
import textwrap
from dataclasses import dataclass
from typing import NoReturn

from cmr.defaults import DB_ENV, DEFAULT_DB_PATH
from tracer.config import ENV_ENDPOINT
from tracer.run.launch import Program
from tracer.run.patterns import parse_patterns

_WIDTH = 96
_VALUE_OPTIONS = frozenset({"--include", "--endpoint", "--db"})

_PATTERN_RULES = """\
include patterns (matched against dotted module names):
  shop          the module shop only
  shop.*        shop itself and every module below it (shop.cart, shop.api.v1)
  *_service     any fnmatch glob ('*' also crosses dots)
  The standard library and site-packages only match patterns that name them without a
  wildcard ('json', 'json.*'): '*' traces your code, not the libraries.
  Several patterns: repeat --include or separate them with commas.
  Default: the script's own module (its file name without .py), or, with -m, the module's
  top-level package with everything below it.

what is traced in a matching module:
  functions defined in it, and the methods (plain, static, class, async, generator) of classes
  defined in it; not dunder methods except __call__, not properties, not lambdas, not functions
  defined inside other functions. The routes of Flask, Django, Starlette, FastAPI and aiohttp
  apps are traced by the web integrations (each request, its route and its view function);
  other functions a decorator registered while the module ran (callbacks) keep the untraced
  original: decorate those with @tracer.traced.

services, task queues and RPC (docs/guide.md, "Web services", "Task queues and RPC"):
  Servers (WSGI, Flask, Django, ASGI, Starlette, FastAPI, aiohttp, gRPC) continue the caller's
  sequence from its traceparent header; clients (requests, urllib3, httpx, aiohttp,
  urllib/http.client, gRPC) send one; Celery tasks and RQ jobs run in the sequence that queued
  them. INVOSEQ_DISABLED_INTEGRATIONS=flask,requests (or OpenTelemetry's
  OTEL_PYTHON_DISABLED_INSTRUMENTATIONS) turns some off; OTEL_PYTHON_EXCLUDED_URLS leaves
  requests untraced (health checks); 'tracer info' lists the integrations and their states.
  tracer run --include app -m gunicorn -w 2 app:app   # each worker traced, a tree per request"""

_RUN_EXAMPLES = """\
examples:
  tracer run examples/shop.py            # traces shop.py's functions, prints the slowest
  tracer run --include 'shop.*' app.py --port 8000   # --port 8000 goes to app.py
  tracer run -m mypkg.tool --verbose     # traces mypkg.* ; --verbose goes to the program
  tracer run --db /tmp/t.sqlite app.py   # keep this run's sequences in /tmp/t.sqlite
  tracer run --endpoint tcp://127.0.0.1:7311 app.py   # send to a running 'cmr serve'"""


class UsageError(Exception):
    """A mistake on the command line: reported in one line, exit code 1."""


class ListIntegrations(Exception):  # noqa: N818 - a request, not an error
    """``tracer run --list-integrations`` with no program: list them and exit."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@dataclass(frozen=True, slots=True)
class RunOptions:
    program: Program
    patterns: tuple[str, ...]
    endpoint: str | None
    db: str | None
    report: bool
    list_integrations: bool = False


def top_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tracer",
        usage="tracer [-h] [-V] (run ... | info)",
        description=textwrap.fill(
            "Trace Python programs: every call of a traced function becomes part of an invocation "
            "sequence, one call tree per transaction, across threads and processes. In code: "
            "'from tracer import traced'. With no code change: 'tracer run'.",
            width=_WIDTH,
        ),
        epilog="commands:\n  run    run a script or module with its functions traced "
        "(see 'tracer run --help')\n  info   say what is running: version, Python, "
        "implementation, repository, integrations\n\n" + _RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-V", "--version", action="store_true", help="print the version and implementation, exit"
    )
    return parser


def _run_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tracer run",
        usage=(
            "tracer run [--include PATTERN]... [--endpoint ENDPOINT] [--db PATH] [--no-report]\n"
            "                  (script.py | -m module) [args...]"
        ),
        description=textwrap.fill(
            "Run a Python script or module traced, with no code change: the functions of the "
            "modules that match the include patterns are traced as the modules are imported "
            "(and the script's own functions as they are defined). The Python processes the "
            "program starts (multiprocessing and ProcessPoolExecutor workers, with any start "
            "method; subprocesses running Python) trace the same modules and send to the same "
            "repository: they start the tracer through PYTHONPATH, so a child run with -I or "
            "-E is not traced. Everything after the script "
            "or '-m module' goes to the program, whose sys.argv, sys.path[0], stdout and exit "
            "code are as with 'python'. Unless an endpoint is given (--endpoint or "
            f"${ENV_ENDPOINT}), a repository is started for the run (cmr serve, on a private "
            "socket, storing into --db) and afterwards the slowest sequences of this run and "
            "the call tree of the slowest are printed to stderr. On a terminal, an end still "
            "going after 0.75 s (the last events sent, the report read) shows its progress on "
            "stderr; INVOSEQ_PROGRESS=0 turns it off.",
            width=_WIDTH,
        ),
        epilog=_PATTERN_RULES + "\n\n" + _RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("script", nargs="?", help="the Python file to run, then its arguments")
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like python -m")
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATTERN",
        help="trace the modules matching PATTERN (repeatable; see below)",
    )
    parser.add_argument(
        "--endpoint",
        metavar="ENDPOINT",
        help=(
            f"send to this repository (default: ${ENV_ENDPOINT}); several nodes: comma-separated;"
            " no embedded one, no report"
        ),
    )
    parser.add_argument(
        "--db",
        metavar="PATH",
        help=f"the embedded repository's file (default: ${DB_ENV}, else {DEFAULT_DB_PATH})",
    )
    parser.add_argument(
        "--no-report", dest="report", action="store_false", help="print nothing after the run"
    )
    parser.add_argument(
        "--list-integrations",
        action="store_true",
        help="after the run, print each integration's state in the program (active, not "
        "imported, disabled, unsupported version) and why; with no program, print them now",
    )
    return parser


def parse_run(tokens: list[str]) -> RunOptions:
    """``tracer run``'s arguments: its own options up to the script or ``-m module``, then the
    program's arguments, passed on untouched. Raises UsageError (SystemExit for --help)."""
    own, script, module, program_args = _split_program(tokens)
    parsed = _run_parser().parse_args(own)
    if script is None and module is None and parsed.list_integrations:
        raise ListIntegrations
    if script is None and module is None:
        raise UsageError("nothing to run: give a script (tracer run app.py) or -m module")
    program = Program(script=script, module=module, args=tuple(program_args))
    try:
        patterns = parse_patterns(parsed.include) or program.default_patterns()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    endpoint = parsed.endpoint or os.environ.get(ENV_ENDPOINT) or None
    if endpoint is not None and parsed.db is not None:
        source = "--endpoint" if parsed.endpoint else f"${ENV_ENDPOINT}"
        raise UsageError(f"--db is for the embedded repository, but {source} names another one")
    return RunOptions(
        program, patterns, endpoint, parsed.db, parsed.report, parsed.list_integrations
    )


def _split_program(tokens: list[str]) -> tuple[list[str], str | None, str | None, list[str]]:
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "--":
            rest = tokens[index + 1 :]
            return tokens[:index], (rest[0] if rest else None), None, rest[1:]
        if token == "-m" or (token.startswith("-m") and not token.startswith("--")):
            module = token[2:] or (tokens[index + 1] if index + 1 < len(tokens) else None)
            if not module:
                raise UsageError("-m needs a module name")
            skip = 1 if token[2:] else 2
            return tokens[:index], None, module, tokens[index + skip :]
        if token.startswith("-") and token != "-":
            name = token.split("=", 1)[0]
            index += 2 if name in _VALUE_OPTIONS and "=" not in token else 1
            continue
        return tokens[:index], token, None, tokens[index + 1 :]
    return tokens, None, None, []

"""``tracer``: run a Python program traced, with no code change (``tracer run``).

``tracer run`` installs the import hook (``tracer.run.autowrap``) for the include patterns, starts
an embedded repository unless one is configured, hands both on to the Python processes the program
will start (``tracer.run.bootstrap``: environment variables and a ``sitecustomize`` on
``PYTHONPATH``), runs the program as ``__main__`` in this process (``tracer.run.launch``), finishes
it the way the interpreter would (non-daemon threads joined, atexit handlers run), flushes the
tracer, stops the repository and prints the report (``tracer.run.summary``), and exits as the
interpreter would (by SIGINT after an uncaught KeyboardInterrupt). The program's stdout is
untouched; everything ``tracer`` says goes to stderr. Only ``tracer run`` (here and in
``tracer.run.summary``) imports ``cmr``, and only after the program has run, so a ``*`` include
pattern never finds it already loaded.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import tracer
from cmr.defaults import DB_ENV, DEFAULT_DB_PATH
from tracer import _runtime as runtime
from tracer._core import ids
from tracer.config import ConfigError
from tracer.run import autowrap, bootstrap, launch
from tracer.run.arguments import (
    ListIntegrations,
    RunOptions,
    UsageError,
    parse_run,
    top_parser,
)
from tracer.run.embedded import EmbeddedRepository, RepositoryError
from tracer.run.launch import ProgramNotFoundError
from tracer.run.summary import ReportOptions, render_report

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from cmr.cli.progress import Progress


@dataclass(frozen=True, slots=True)
class Ending:
    """How ``tracer run`` ends, as ``python`` would have: with the exit status ``code``, or, when
    the program ended by an uncaught KeyboardInterrupt, by ``signal`` (SIGINT) at its default."""

    code: int
    signal: signal.Signals | None = None


def main(argv: list[str] | None = None) -> int:
    """The ``tracer`` console script; returns the exit code (the program's, for ``run``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    done = _other_command(args)
    if done is not None:
        return done
    try:
        options = parse_run(args[1:])
    except UsageError as exc:
        print(f"tracer run: error: {exc} (see 'tracer run --help')", file=sys.stderr)
        return 1
    except SystemExit as exc:  # --help printed
        return exc.code if isinstance(exc.code, int) else 0
    except ListIntegrations:
        from tracer.run.info import integrations_text, say

        return say(integrations_text())
    try:
        ending = run(options)
    except KeyboardInterrupt:  # Ctrl-C while starting or reporting: cleaned up on the way out
        return 130
    return ending.code if ending.signal is None else _die_by(ending.signal)


def _other_command(args: list[str]) -> int | None:
    """``tracer --help``, ``--version``, ``info`` or no command: the exit code; None for
    ``run``."""
    if args and args[0] in ("-h", "--help"):
        top_parser().print_help()
        return 0
    if args and args[0] in ("-V", "--version"):
        from tracer.run.info import version_line

        print(version_line())
        return 0
    if args and args[0] == "info":
        from tracer.run.info import main as info

        return info(args[1:])
    if not args or args[0] != "run":
        problem = "missing command" if not args else f"unknown command {args[0]!r}"
        print(f"tracer: error: {problem} (see 'tracer --help')", file=sys.stderr)
        return 1
    return None


def run(options: RunOptions) -> Ending:
    """Run the program traced; returns how to end (1 when tracer run itself failed).

    A process the program forks that comes back here (gunicorn's workers leave with
    ``sys.exit``) ends as that child would under ``python``: its own tracer shut down, its
    status returned. The repository and the report are the parent's: it never stops them."""
    try:
        launch.check(options.program)
    except ProgramNotFoundError as exc:
        print(f"tracer run: error: {exc}", file=sys.stderr)
        return Ending(1)
    started_ns = time.time_ns()
    repository: EmbeddedRepository | None = None
    db = None
    endpoint = options.endpoint
    if endpoint is None:
        # Not cmr.store.default_db_path(): importing cmr before the program would put it among
        # the modules already loaded, which a '*' pattern wraps. Same rule, kept in step.
        db = os.path.abspath(options.db or os.environ.get(DB_ENV) or DEFAULT_DB_PATH)
        try:
            repository = EmbeddedRepository.start(db, meanwhile=_load_the_sender)
        except RepositoryError as exc:
            print(f"tracer run: error: {exc}", file=sys.stderr)
            return Ending(1)
        endpoint = repository.endpoint
    ids.adopt_argv(launch.program_argv(options.program))  # the program's, not 'tracer run ...'
    try:
        tracer.configure(endpoint=endpoint, instrument=True)
    except ConfigError as exc:
        if repository is not None:
            repository.stop()
        print(f"tracer run: error: {exc}", file=sys.stderr)
        return Ending(1)
    # Child processes send to the same repository with the same settings, follow their threads,
    # and, when they run Python, trace the same modules (tracer.run.bootstrap).
    os.environ.update(runtime.child_settings())
    os.environ.update(bootstrap.environment(options.patterns, os.environ))
    owner = os.getpid()
    try:
        ending = _run_program(options)
        if options.list_integrations:  # in each process the program forked too (gunicorn's)
            from tracer.run.info import integrations_text

            which = "this run" if os.getpid() == owner else f"the forked process {os.getpid()}"
            _say(f"\ntracer: the integrations in {which}:\n" + integrations_text())
    finally:
        atexit.unregister(tracer.shutdown)
        forked = os.getpid() != owner  # a child the program forked, back here at its end
        shown = _flush_progress(wanted=not forked)
        try:
            acknowledged = tracer.shutdown()
            reporting = options.report and db is not None and not forked
            if repository is not None and not forked:
                shown.phase("tracer: " + ("writing the report" if reporting else "stopping"))
            report = _stop_repository(
                None if forked else repository,
                _report_options(options, db, started_ns) if reporting else None,
                acknowledged=acknowledged,
                endpoint=endpoint,
                progress=shown,
            )
        finally:
            shown.close()
    if report is not None:
        _say("\n" + report)
    return ending


def _load_the_sender() -> None:
    """Import what ``tracer.configure`` starts (the sender, ZeroMQ, the sampler) while the
    embedded repository starts, rather than after it listens: the two side by side instead of
    one after the other (docs/performance.md, "tracer run's own start and end")."""
    for module in ("_sampling.sampler", "_shipping.sender", "_shipping.transport"):
        importlib.import_module(f"tracer.{module}")


def _stop_repository(
    repository: EmbeddedRepository | None,
    report: ReportOptions | None,
    *,
    acknowledged: bool,
    endpoint: str,
    progress: Progress,
) -> str | None:
    """Stop the embedded repository (when it is this process's) and say what went wrong; the
    report's text when one is asked for. With every event acknowledged, everything is committed:
    the report reads while the repository stops."""
    text = None
    try:
        if repository is not None and report is not None and acknowledged:
            repository.request_stop()
            text = _report_text(report)
    finally:
        problem = None if repository is None else repository.stop()
    progress.close()  # before anything is said
    _flush_stdout()
    if not acknowledged:
        _say(f"tracer: warning: the repository at {endpoint} did not acknowledge every event")
    if problem is not None:
        _say(f"tracer: warning: {problem}")
    if repository is None or report is None:
        return None
    return text if text is not None else _report_text(report)


def _flush_progress(*, wanted: bool) -> Progress:
    """Progress of the end of the run on a terminal: the events the final flush has left to
    send, acknowledged one batch after the other (then ``run`` names the repository's stop and
    the report). Imported here, after the program ran, as every use of ``cmr`` is."""
    from cmr.cli import progress

    if not wanted or not progress.enabled():  # a forked process: its parent shows the end
        return progress.NO_PROGRESS
    first = runtime.acknowledged_events()
    left = runtime.unacknowledged_events()
    shown = progress.start("tracer: sending", unit="events", total=left)
    shown.follow(lambda: runtime.acknowledged_events() - first)
    return shown


def _run_program(options: RunOptions) -> Ending:
    """Run the program and finish it like the interpreter: traceback, then non-daemon threads
    joined and atexit handlers run (the tracer's own shutdown is left to ``run``)."""
    patterns = autowrap.install(options.patterns, wrap_loaded=True)
    interrupted = False
    try:
        launch.run(options.program, patterns)
        code = 0
    except ProgramNotFoundError as exc:
        print(f"tracer run: error: {exc}", file=sys.stderr)
        code = 1
    except SystemExit as exc:
        code = _exit_status(exc.code)
    except BaseException as exc:  # the program's uncaught exception, reported as Python would
        shown = launch.program_exception(exc)
        sys.excepthook(type(shown), shown, shown.__traceback__)
        code = 1
        # python dies by SIGINT after a KeyboardInterrupt, not a subclass (Modules/main.c)
        interrupted = type(exc) is KeyboardInterrupt
    atexit.unregister(tracer.shutdown)  # run() shuts down after the program's own handlers
    _join_threads_and_run_atexit()
    return Ending(130, signal.SIGINT) if interrupted else Ending(code)


def _join_threads_and_run_atexit() -> None:
    """What the interpreter does after the main module ends, in its order. Ctrl-C while it
    waits for the threads is reported and ignored, as the interpreter does."""
    shutdown_threads = getattr(threading, "_shutdown", None)
    if shutdown_threads is not None:
        try:
            shutdown_threads()
        except KeyboardInterrupt as exc:  # worded as this Python words it
            if sys.version_info >= (3, 13):
                print("Exception ignored on threading shutdown:", file=sys.stderr)
            else:
                print(f"Exception ignored in: {threading!r}", file=sys.stderr)
            traceback.print_exception(exc)
    atexit._run_exitfuncs()


def _exit_status(code: object) -> int:
    """SystemExit's code as the interpreter turns it into an exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _die_by(signum: signal.Signals) -> int:
    """End by ``signum`` at its default, as python ends after an uncaught KeyboardInterrupt
    (``exit_sigint`` in CPython's Modules/main.c): a shell sees the Ctrl-C. The status to exit
    with if the signal did not end the process."""
    _flush_stdout()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.flush()
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    return 128 + signum


def _report_options(options: RunOptions, db: str | None, started_ns: int) -> ReportOptions:
    return ReportOptions(db or "", started_ns, options.db, options.patterns, _colour())


def _report_text(options: ReportOptions) -> str:
    from cmr.store import StoreError

    try:
        return render_report(options)
    except (StoreError, OSError) as exc:
        return f"tracer: could not read this run's sequences: {exc}"


def _colour() -> bool:
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


def _flush_stdout() -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):  # stdout closed or replaced
        sys.stdout.flush()


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)

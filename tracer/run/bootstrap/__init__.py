"""``tracer run`` in the Python processes the traced program starts.

More in docs/architecture.md, "tracer/run/bootstrap/__init__.py".
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping
from types import FunctionType, ModuleType
from typing import Any, Final

from tracer import _patching as patching
from tracer._core import recorder
from tracer._patching import processes
from tracer.config import ENV_INSTRUMENT
from tracer.run import autowrap, launch
from tracer.run.patterns import is_external, module_origin, parse_patterns

#: The include patterns, comma-separated: set, it asks a Python child to trace like its parent.
ENV_RUN_INCLUDE: Final = "INVOSEQ_RUN_INCLUDE"
#: The directory holding the ``sitecustomize`` that bootstraps the children.
DIRECTORY: Final = os.path.dirname(os.path.abspath(__file__))
_PYTHONPATH: Final = "PYTHONPATH"
_TRUE: Final = frozenset({"1", "true", "yes", "on"})


def environment(patterns: tuple[str, ...], environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that make Python children started with ``environ`` trace ``patterns``: the
    include patterns and ``PYTHONPATH`` with the bootstrap directory first (once)."""
    return {ENV_RUN_INCLUDE: ",".join(patterns), _PYTHONPATH: _with_bootstrap(environ)}


def _with_bootstrap(environ: Mapping[str, str]) -> str:
    entries = [e for e in environ.get(_PYTHONPATH, "").split(os.pathsep) if e]
    return os.pathsep.join([DIRECTORY, *(e for e in entries if e != DIRECTORY)])


def inherit(child: MutableMapping[str, str], environ: Mapping[str, str] = os.environ) -> None:
    """Give an environment a program built for its child (``subprocess.Popen(env=...)``) what
    this process's own environment says about tracing Python children, unless it says otherwise
    itself: nothing when this process was not asked (no ``INVOSEQ_RUN_INCLUDE``)."""
    patterns = environ.get(ENV_RUN_INCLUDE)
    if not patterns:
        return
    child.setdefault(ENV_RUN_INCLUDE, patterns)
    if child[ENV_RUN_INCLUDE]:  # an empty value is the caller's way of saying no
        child[_PYTHONPATH] = _with_bootstrap(child)


processes.extend_child_environment(inherit)  # every child this process starts


# -- in the child ----------------------------------------------------------------------------


_lock = threading.Lock()
_patched: list[tuple[Any, str, Any]] = []  # (owner, name, original)


def start(environ: Mapping[str, str] = os.environ) -> bool:
    """Trace this process as ``tracer run`` traces its program, if ``environ`` asks for it.
    Never raises: a failure is counted, logged once, undone; the process runs untraced."""
    text = environ.get(ENV_RUN_INCLUDE, "")
    if not text:
        return False
    try:
        patterns = parse_patterns([text])
        if not patterns:
            return False
        autowrap.install(patterns, wrap_loaded=True)
        if environ.get(ENV_INSTRUMENT, "").strip().lower() in _TRUE:
            patching.instrument()
        _patch_main_runners()
    except Exception as exc:
        uninstall()
        recorder.internal_error(exc)
        return False
    return True


def uninstall() -> None:
    """Undo ``start()``: the main-module hooks, the import hook and the instrumentation."""
    with _lock:
        while _patched:
            owner, name, original = _patched.pop()
            setattr(owner, name, original)
    autowrap.uninstall()
    patching.uninstrument()


def _patch_main_runners() -> None:
    import multiprocessing.spawn
    import runpy

    with _lock:
        if _patched:
            return
        for owner, name, make in (
            (multiprocessing.spawn, "_fixup_main_from_path", _fixup_from_path),
            (multiprocessing.spawn, "_fixup_main_from_name", _fixup_from_name),
            (runpy, "_run_module_as_main", _run_module_as_main),
        ):
            original = getattr(owner, name, None)
            if original is None:  # another Python's internals: that main module runs untraced
                continue
            setattr(owner, name, make(original))
            _patched.append((owner, name, original))


# -- the main module of a spawn or forkserver child: __mp_main__ ----------------------------------


def _fixup_from_path(original: Callable[[str], None]) -> Callable[[str], None]:
    """multiprocessing runs the parent's main script as ``__mp_main__``: traced when ``tracer
    run`` would trace it as the program (its name, the file's stem, matches the patterns)."""

    def fixup(main_path: str) -> None:
        before = sys.modules.get("__mp_main__")
        original(main_path)
        name = os.path.basename(main_path).removesuffix(".py")
        _trace_mp_main(before, name, external=False, script=not main_path.endswith(".pyc"))

    return fixup


def _fixup_from_name(original: Callable[[str], None]) -> Callable[[str], None]:
    """The same for a program run as ``-m module``."""

    def fixup(mod_name: str) -> None:
        before = sys.modules.get("__mp_main__")
        original(mod_name)
        main = sys.modules.get("__mp_main__")
        external = is_external(None if main is None else module_origin(main))
        _trace_mp_main(before, mod_name, external=external, script=True)

    return fixup


def _trace_mp_main(before: object, name: str, *, external: bool, script: bool) -> None:
    try:
        main = sys.modules.get("__mp_main__")
        patterns = autowrap.installed()
        if main is None or main is before or patterns is None or not script:
            return  # not re-imported here (forked from a process that did), or not asked for
        if patterns.matches(name, external=external):
            wrap_main(main)
    except Exception as exc:
        recorder.internal_error(exc)


def wrap_main(module: ModuleType) -> int:
    """Wrap what the re-imported main module defines, in the module and in the namespace its
    functions run in: ``runpy`` ran the script in a namespace of its own, of which
    multiprocessing keeps a copy as the module, so a function calling another finds it there."""
    before = dict(vars(module))
    count = autowrap.wrap_module(module)
    namespace = vars(module)
    for name, original in before.items():
        wrapper = namespace.get(name)
        if wrapper is original or not isinstance(original, FunctionType):
            continue
        home: dict[str, Any] = original.__globals__
        if home is not namespace and home.get(name) is original:
            home[name] = wrapper
    return count


# -- the main module of a `python -m module` child ------------------------------------------------


def _run_module_as_main(original: Callable[..., Any]) -> Callable[..., Any]:
    """``python -m module`` runs the module through ``runpy._run_module_as_main``: a module the
    patterns name runs as under ``tracer run -m``, its functions traced as they are defined."""

    def run_module_as_main(mod_name: str, alter_argv: bool = True) -> Any:
        program = _traced_module(mod_name) if alter_argv else None
        if program is None:
            return original(mod_name, alter_argv)
        patterns = autowrap.installed()
        assert patterns is not None
        try:
            launch.run(program, patterns)
        except BaseException as exc:  # the program's own: shown without the tracer's frames
            shown = launch.program_exception(exc)
        else:
            return None
        # The same exception, raised outside the handler so that its chain stays as it was.
        raise shown

    return run_module_as_main


def _traced_module(name: str) -> launch.Program | None:
    """The program to run when ``name`` is a module the patterns trace, else None (and then
    runpy runs it, reporting a missing module in its own words)."""
    patterns = autowrap.installed()
    if patterns is None or not (patterns.matches(name) or patterns.matches(name + ".__main__")):
        return None
    try:
        spec = launch.main_spec(name)
    except launch.ProgramNotFoundError:
        return None
    if not patterns.matches(spec.name, external=is_external(spec.origin)):
        return None
    return launch.Program(script=None, module=name, args=tuple(sys.argv[1:]))

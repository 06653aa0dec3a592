"""Run a script or a module as ``__main__``, as ``python script.py`` and ``python -m`` do, with the
functions it defines traced from the moment they are defined.

More in docs/architecture.md, "tracer/run/launch.py".
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import io
import os
import runpy
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from types import CodeType, FrameType, ModuleType, TracebackType
from typing import Final

from tracer._core.wrapper_frames import WRAPPER_CODES
from tracer.run.autowrap import defining_namespace
from tracer.run.patterns import IncludePatterns, is_external


class ProgramNotFoundError(Exception):
    """The script or module to run does not exist (a one-line message, nothing has run)."""


@dataclass(frozen=True, slots=True)
class Program:
    """What to run: exactly one of ``script`` (a path as given) and ``module`` (a dotted name)."""

    script: str | None
    module: str | None
    args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The name the program would have if it were imported: a script's file stem, or the
        module name. Include patterns are matched against it."""
        if self.module is not None:
            return self.module
        assert self.script is not None
        base = os.path.basename(os.path.normpath(self.script))
        return base.removesuffix(".pyc").removesuffix(".py")

    def default_patterns(self) -> tuple[str, ...]:
        """What ``tracer run`` traces when no ``--include`` is given: the script itself, or the
        ``-m`` module's top-level package with everything below it."""
        if self.module is not None:
            return (self.module.split(".")[0] + ".*",)
        return (self.name,)


def check(program: Program) -> None:
    """Fail before anything starts when the program plainly cannot run. Only a script's file and
    a module's top-level name are checked: finding a submodule would import its package, before
    the hook is in place."""
    if program.script is not None:
        if not os.path.exists(program.script):
            raise ProgramNotFoundError(f"can't open file {program.script!r}: no such file")
        return
    assert program.module is not None
    if not program.module or program.module.startswith("."):
        raise ProgramNotFoundError(f"-m needs an absolute module name, got {program.module!r}")
    top = program.module.split(".")[0]
    if top not in sys.modules and importlib.util.find_spec(top) is None:
        raise ProgramNotFoundError(f"No module named {top}")


def program_argv(program: Program) -> list[str]:
    """The program's command line as the process's identity names it: ``sys.argv`` as the
    script will see it; for a module, ``-m`` and its name (finding its file would import its
    packages before the hook is in place)."""
    if program.script is not None:
        return [program.script, *program.args]
    assert program.module is not None
    return ["-m", program.module, *program.args]


def run(program: Program, patterns: IncludePatterns) -> None:
    """Run the program in this process. Whatever it raises propagates, SystemExit included; a
    missing submodule raises ProgramNotFoundError before any of the program's own code has run."""
    if program.script is not None:
        _run_script(program.script, program.args, patterns, program.name)
    else:
        assert program.module is not None
        _run_module(program.module, program.args, patterns)


def _run_script(script: str, args: tuple[str, ...], patterns: IncludePatterns, name: str) -> None:
    path = os.path.abspath(script)
    sys.argv[:] = [script, *args]
    if os.path.isdir(path) or path.endswith(".pyc") or zipfile.is_zipfile(path):
        _set_path0(path)
        runpy.run_path(path, run_name="__main__")
        return
    _set_path0(os.path.dirname(path))
    with io.open_code(path) as file:
        source = file.read()
    module = _fresh_main(
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __package__=None,
        __spec__=None,
    )
    code = compile(source, path, "exec", dont_inherit=True)
    _exec(code, module, trace=patterns.matches(name))


def _run_module(name: str, args: tuple[str, ...], patterns: IncludePatterns) -> None:
    _set_path0(os.getcwd())
    spec = main_spec(name)
    loader = spec.loader
    get_code = getattr(loader, "get_code", None)
    code = None if get_code is None else get_code(spec.name)
    if code is None:
        raise ProgramNotFoundError(f"No code object available for {spec.name}")
    sys.argv[:] = [spec.origin or name, *args]
    module = _fresh_main(
        __file__=spec.origin,
        __cached__=spec.cached,
        __loader__=loader,
        __package__=spec.parent,
        __spec__=spec,
    )
    _exec(code, module, trace=patterns.matches(spec.name, external=is_external(spec.origin)))


def main_spec(name: str) -> ModuleSpec:
    """The spec of the module to run, as ``python -m`` finds it (a package runs its
    ``__main__``). Importing the parent packages runs their code: errors there propagate."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        if name == missing or name.startswith(missing + "."):
            raise ProgramNotFoundError(f"No module named {missing}") from None
        raise
    if spec is None:
        raise ProgramNotFoundError(f"No module named {name}")
    if spec.submodule_search_locations is not None:
        if name.endswith(".__main__"):
            raise ProgramNotFoundError("Cannot use package as __main__ module")
        try:
            return main_spec(name + ".__main__")
        except ProgramNotFoundError as exc:
            raise ProgramNotFoundError(
                f"{exc}; {name!r} is a package and cannot be directly executed"
            ) from None
    return spec


def _set_path0(directory: str) -> None:
    """Replace ``tracer``'s own entry with the program's, unless Python runs with ``-P`` or
    ``-I`` and so added none."""
    if not sys.flags.safe_path:
        sys.path[0] = directory


def _fresh_main(**attributes: object) -> ModuleType:
    module = ModuleType("__main__")
    vars(module).update(attributes, __builtins__=builtins, __doc__=None)
    sys.modules["__main__"] = module
    return module


def _exec(code: CodeType, module: ModuleType, *, trace: bool) -> None:
    if trace and _defines_something(code):
        exec(code, vars(module), defining_namespace(module))
    else:
        exec(code, vars(module))


def _defines_something(code: CodeType) -> bool:
    """Whether module code defines a function or class (lambdas and comprehensions aside):
    module-level name lookups are slower through DefiningNamespace, so only pay when needed."""
    return any(
        isinstance(const, CodeType) and not const.co_name.startswith("<")
        for const in code.co_consts
    )


#: ``tracer run``'s own package: its frames lead every traceback of the program, with runpy's.
_OWN_PACKAGE: Final = __name__.rpartition(".")[0]
_RUNPY: Final = frozenset({"runpy", "<frozen runpy>"})


def _leading(frame: FrameType) -> bool:
    """A frame of ``tracer run`` itself (or runpy), before the program's first."""
    name = frame.f_globals.get("__name__", "")
    own = name == _OWN_PACKAGE or name.startswith(_OWN_PACKAGE + ".")
    return own or name in _RUNPY or frame.f_code.co_filename in _RUNPY


def _wrapper(frame: FrameType) -> bool:
    """A frame of the traced wrappers, between every two frames of the program."""
    return frame.f_code in WRAPPER_CODES


def program_exception(exc: BaseException) -> BaseException:
    """``exc`` with tracebacks that read as they would under ``python script.py``: without the
    leading frames of ``tracer run`` itself, nor the tracer's wrappers between the program's own
    frames (in chained exceptions too). Tracebacks are relinked in place."""
    exc.__traceback__ = _without(exc.__traceback__, lambda f: _leading(f) or _wrapper(f))
    seen = {id(exc)}
    pending = [exc.__cause__, exc.__context__]
    while pending:
        chained = pending.pop()
        if chained is None or id(chained) in seen:
            continue
        seen.add(id(chained))
        chained.__traceback__ = _without(chained.__traceback__, _wrapper)
        pending += [chained.__cause__, chained.__context__]
    return exc


def _without(tb: TracebackType | None, hide: Callable[[FrameType], bool]) -> TracebackType | None:
    def hidden(entry: TracebackType) -> bool:
        return hide(entry.tb_frame)

    while tb is not None and hidden(tb):
        tb = tb.tb_next
    entry = tb
    while entry is not None:
        following = entry.tb_next
        while following is not None and hidden(following):
            following = following.tb_next
        entry.tb_next = following
        entry = following
    return tb

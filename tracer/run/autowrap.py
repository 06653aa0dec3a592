"""Trace whole modules with no code change: an import hook that traces what a module defines.

``install(["shop.*"])`` puts a finder at the front of ``sys.meta_path``. For a module whose name
matches, it asks the finders behind it for the real spec and swaps the loader for one that runs the
real loader's ``exec_module`` and then traces, with ``tracer.traced``, everything the module itself
defines. No source is rewritten: the module runs exactly as it would.

More in docs/architecture.md, "tracer/run/autowrap.py".
"""

from __future__ import annotations

import builtins
import functools
import logging
import sys
import threading
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from types import FunctionType, ModuleType
from typing import Any

from tracer._core import accel, codes
from tracer._core.decorator import is_traced
from tracer._core.traced import traced
from tracer.run import import_phase
from tracer.run.patterns import IncludePatterns, Verdict, is_external, module_origin

log = logging.getLogger("tracer")

# -- wrapping what a module defines -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Replacement:
    owner: Any  # the module or class whose attribute was replaced
    name: str
    original: Any
    wrapper: Any


_replacements: list[_Replacement] = []  # appends are atomic under the GIL
_instrumented_functions: list[FunctionType] = []  # traced in place: their code instrumented
_replaced_loaders: list[tuple[ModuleType, Any]] = []
_error_logged = False


def _report_internal_error(exc: BaseException, module_name: str) -> None:
    global _error_logged
    if not _error_logged:
        _error_logged = True
        log.warning(
            "invoseq: could not wrap module %s for tracing; it runs untraced "
            "(reported once; imports go on normally)",
            module_name,
            exc_info=exc,
        )


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _defined_function(value: object, module_name: str) -> bool:
    """A plain function written in module ``module_name`` that is not traced yet."""
    return (
        isinstance(value, FunctionType)
        and value.__module__ == module_name
        and value.__name__ != "<lambda>"
        and not is_traced(value)
    )


def _instrumented(original: Any, wrapper: Any) -> bool:
    """Whether tracing left ``original`` in place (its code instrumented): then it is recorded
    for ``uninstall`` to stop tracing, and nothing is replaced."""
    if wrapper is not original:
        return False
    function = original.__func__ if isinstance(original, staticmethod | classmethod) else original
    if isinstance(function, FunctionType):
        _instrumented_functions.append(function)
    return True


def _replace(owner: Any, name: str, original: Any, wrapper: Any) -> bool:
    if _instrumented(original, wrapper):
        return True
    try:
        setattr(owner, name, wrapper)
    except (AttributeError, TypeError) as exc:  # a class that refuses new attributes
        log.debug("invoseq: cannot trace %s.%s: %s", owner, name, exc)
        return False
    _replacements.append(_Replacement(owner, name, original, wrapper))
    return True


def _wrap_class(cls: type, module_name: str) -> int:
    count = 0
    for name, member in list(vars(cls).items()):
        if isinstance(member, type):
            nested = member.__module__ == module_name and member.__qualname__ == (
                f"{cls.__qualname__}.{name}"
            )
            if nested:
                count += _wrap_class(member, module_name)
            continue
        if _is_dunder(name) and name != "__call__":
            continue
        function = member.__func__ if isinstance(member, staticmethod | classmethod) else member
        if _defined_function(function, module_name) and _replace(cls, name, member, traced(member)):
            count += 1
    return count


def wrap_definition(name: str, value: Any, module_name: str) -> Any:
    """What to store under module-level ``name``: a traced wrapper for a function the module
    defines, the class itself (its methods wrapped in place) for a class it defines, else
    ``value`` unchanged. The same rules as ``wrap_module``; the caller records a replaced
    function for ``uninstall``."""
    if _is_dunder(name):
        return value
    if _defined_function(value, module_name):
        return traced(value)
    if isinstance(value, type) and value.__module__ == module_name:
        _wrap_class(value, module_name)
    return value


def wrap_module(module: ModuleType) -> int:
    """Wrap, in place, the functions and class methods ``module`` defines; returns how many.

    For modules imported before ``install`` and for ``__main__``. Idempotent: traced functions
    are skipped. ``uninstall`` puts the originals back."""
    module_name = module.__name__
    count = 0
    for name, value in list(vars(module).items()):
        if _is_dunder(name):
            continue
        if _defined_function(value, module_name):
            count += _replace(module, name, value, traced(value))
        elif isinstance(value, type) and value.__module__ == module_name:
            count += _wrap_class(value, module_name)
    return count


def _defined(module: ModuleType, key: str, value: Any) -> Any:
    """What module-level code storing ``value`` under ``key`` stores (``wrap_definition``), the
    original recorded for ``uninstall``: a namespace's store of a function or class."""
    module_name = module.__name__
    fresh = isinstance(value, FunctionType) and not is_traced(value)
    try:
        wrapped = wrap_definition(key, value, module_name)
    except Exception as exc:
        _report_internal_error(exc, module_name)
        wrapped = value
    if wrapped is not value:
        _replacements.append(_Replacement(module, key, value, wrapped))
    elif fresh and is_traced(value):
        _instrumented_functions.append(value)
    return wrapped


def defining_namespace(module: ModuleType) -> MutableMapping[str, Any]:
    """The local namespace to ``exec`` ``module``'s code in so that its functions are traced the
    moment they are defined (``DefiningNamespace``'s rules): in C when it is built
    (``_namespace.c``: module-level code reads and writes names at about the untraced speed;
    through the Python class each is a method call, a module-level loop ten times slower)."""
    if _CNamespace is None:
        return DefiningNamespace(module)
    return _CNamespace(vars(module), builtins.__dict__, functools.partial(_defined, module))


class DefiningNamespace(MutableMapping[str, Any]):
    """The local namespace to ``exec`` a module's code in so that its functions are traced the
    moment they are defined, before module-level code calls them (what a script's ``main()``
    does). Every read and write goes to the module's real globals, so ``global`` statements,
    ``globals()`` and pickling by reference behave as usual; only stores are intercepted. The
    pure-Python one; ``defining_namespace`` gives the C one where it is built."""

    __slots__ = ("_builtins", "_globals", "_module")

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._globals = vars(module)
        self._builtins = builtins.__dict__

    def __getitem__(self, key: str) -> Any:
        module_globals = self._globals
        if key in module_globals:
            return module_globals[key]
        return self._builtins[key]  # checked here so a builtin's lookup raises no KeyError

    def __setitem__(self, key: str, value: Any) -> None:
        self._globals[key] = _defined(self._module, key, value)

    def __delitem__(self, key: str) -> None:
        del self._globals[key]

    def __contains__(self, key: object) -> bool:
        return key in self._globals

    def get(self, key: str, default: Any = None) -> Any:
        return self._globals.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._globals)

    def __len__(self) -> int:
        return len(self._globals)


if accel.speedups is not None:  # the C namespace goes with the accelerator (INVOSEQ_PURE=1: not)
    try:
        from tracer.run import _namespace
    except ImportError:  # pragma: no cover - built with the accelerator
        _namespace = None  # type: ignore[assignment]
else:
    _namespace = None  # type: ignore[assignment]

if _namespace is not None:

    class _CNamespace(_namespace.Namespace, MutableMapping[str, Any]):
        """``_namespace.Namespace`` (reads, writes, ``in`` and ``len`` in C) with the rest of a
        mapping as ``DefiningNamespace`` has it: ``get`` and iteration read the module's
        globals alone."""

        __slots__ = ()

        def get(self, key: str, default: Any = None) -> Any:
            return self.globals.get(key, default)

        def __iter__(self) -> Iterator[str]:
            return iter(self.globals)

else:
    _CNamespace = None  # type: ignore[misc]


# -- the import hook ---------------------------------------------------------------------------


class _WrappingLoader(import_phase.DelegatingLoader):
    """Delegates everything to the real loader; after ``exec_module`` wraps the new module."""

    def __repr__(self) -> str:
        return f"<invoseq wrapping {self._loader!r}>"

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)  # the module's own errors propagate unchanged
        try:
            _replaced_loaders.append((module, self._loader))
            wrap_module(module)
        except Exception as exc:
            _report_internal_error(exc, getattr(module, "__name__", "?"))


class _Finder:
    """The ``sys.meta_path`` entry: decides, then lets the finders behind it find the module."""

    def __init__(self, patterns: IncludePatterns) -> None:
        self.patterns = patterns
        self._busy = threading.local()

    def __repr__(self) -> str:
        return f"<invoseq autowrap finder {list(self.patterns.patterns)!r}>"

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        verdict = self.patterns.verdict(fullname)
        if getattr(self._busy, "active", False):
            return None
        top = import_phase.at_top()
        if verdict is Verdict.NO and not top:
            return None
        self._busy.active = True  # a finder behind us looking up the same name: no recursion
        try:
            # Errors of the other finders propagate, exactly as they would without the hook.
            spec = self._find_behind(fullname, path, target)
        finally:
            self._busy.active = False
        if spec is None or spec.loader is None or spec.origin is None:
            return spec  # not found, or a namespace package: nothing to wrap
        try:
            traces = verdict is Verdict.YES or (
                verdict is Verdict.UNLESS_EXTERNAL and not is_external(spec.origin)
            )
            if traces and hasattr(spec.loader, "exec_module"):
                spec.loader = _WrappingLoader(spec.loader)
            if top:
                import_phase.wrap(spec)
        except Exception as exc:
            _report_internal_error(exc, fullname)
        return spec

    def _find_behind(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> ModuleSpec | None:
        finders = list(sys.meta_path)
        behind = finders[finders.index(self) + 1 :] if self in finders else finders
        for finder in behind:
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec  # type: ignore[no-any-return]
        return None


_finder: _Finder | None = None
_install_lock = threading.Lock()


def install(patterns: Iterable[str], *, wrap_loaded: bool = False) -> IncludePatterns:
    """Trace matching modules imported from now on; ``wrap_loaded`` also wraps matching modules
    already imported (except ``__main__``). Installing again replaces the patterns. Patterns a
    user typed are best checked with ``parse_patterns`` first."""
    global _finder
    compiled = IncludePatterns(patterns)
    with _install_lock:
        _remove_finder()
        _finder = _Finder(compiled)
        sys.meta_path.insert(0, _finder)
    if wrap_loaded:
        for name, module in list(sys.modules.items()):
            if name == "__main__" or not isinstance(module, ModuleType):
                continue
            if compiled.matches(name, external=is_external(module_origin(module))):
                try:
                    wrap_module(module)
                except Exception as exc:
                    _report_internal_error(exc, name)
    return compiled


def uninstall() -> None:
    """Remove the hook and put back every function, method and loader it replaced (unless the
    program replaced them again since). Harmless when nothing is installed."""
    global _finder
    with _install_lock:
        _remove_finder()
        _finder = None
        while _instrumented_functions:
            codes.uninstrument(_instrumented_functions.pop())
        while _replacements:
            item = _replacements.pop()
            if vars(item.owner).get(item.name) is item.wrapper:
                setattr(item.owner, item.name, item.original)
        while _replaced_loaders:
            module, loader = _replaced_loaders.pop()
            if isinstance(getattr(module, "__loader__", None), _WrappingLoader):
                module.__loader__ = loader
            spec = getattr(module, "__spec__", None)
            if isinstance(getattr(spec, "loader", None), _WrappingLoader):
                spec.loader = loader  # type: ignore[union-attr]


def installed() -> IncludePatterns | None:
    """The patterns of the installed hook, or None."""
    return None if _finder is None else _finder.patterns


def _remove_finder() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]

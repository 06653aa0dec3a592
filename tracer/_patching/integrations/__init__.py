"""Integrations with the libraries real services are built from, each patched only once the
program imports it.

More in docs/architecture.md, "Integrations: patched on import".
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any, Final, TypeVar

from tracer._core import imports
from tracer._patching.integrations import states
from tracer._patching.integrations.registry import BY_NAME as REGISTRY_BY_NAME
from tracer._patching.integrations.registry import REGISTRY

log = logging.getLogger("tracer")

#: Every integration, by the name ``disable`` takes, in the order hooks of one module apply
#: (``registry.REGISTRY``).
INTEGRATIONS: Final = tuple(integration.name for integration in REGISTRY)
DISABLED_ENV: Final = states.DISABLED_ENV
OTEL_DISABLED_ENV: Final = states.OTEL_DISABLED_ENV

PatchSpec = tuple[Any, str, Callable[[Any], Any]]
_F = TypeVar("_F")
Hook = Callable[[ModuleType], Iterable[PatchSpec]]
#: Applies the patches of one hook (the caller's patch list keeps the originals).
Apply = Callable[[Iterable[PatchSpec]], None]


#: On a replacement an integration made: something that outlives ``uninstrument`` (a server's
#: bound handler, a middleware stack an application built) checks with ``installed`` that the
#: patch it came from is still in place, and passes through when it is not.
PATCH_MARK: Final = "__invoseq_patch__"


def mark(replacement: _F) -> _F:
    """``replacement``, marked as a patch of an integration (``installed``)."""
    setattr(replacement, PATCH_MARK, True)
    return replacement


def installed(owner: Any, name: str) -> bool:
    """Whether ``owner.name`` is (still) a replacement an integration made (any instrument())."""
    stored = vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name, None)
    return bool(getattr(stored, PATCH_MARK, False))


class UnknownIntegrationError(ValueError):
    """A name ``disable`` does not know."""


def disabled_names(disable: Iterable[str] | None) -> frozenset[str]:
    """The integrations to leave out (``disabled``'s keys)."""
    return frozenset(disabled(disable))


def disabled(disable: Iterable[str] | None) -> dict[str, str]:
    """The integrations to leave out, each with the setting that does: ``disable``, the
    environment's ``INVOSEQ_DISABLED_INTEGRATIONS`` and OpenTelemetry's
    ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``. An unknown name in ``disable`` raises; in the
    environment it is logged (a setting must not stop the program)."""
    names = set()
    for name in disable or ():
        if name not in INTEGRATIONS:
            raise UnknownIntegrationError(
                f"unknown integration {name!r}; known: {', '.join(INTEGRATIONS)}"
            )
        names.add(name)
    reasons, unknown = states.disabled_by(INTEGRATIONS, frozenset(names))
    for name in unknown:
        _warn_once(f"{DISABLED_ENV}: unknown integration {name!r} ignored")
    return reasons


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("invoseq: %s", message)


#: The modules each integration hooks (the keys of its ``HOOKS``, declared in its record), so
#: that an integration's own module is imported only once the program imports its library (a test
#: keeps them in step).
WATCHES: Final[dict[str, tuple[str, ...]]] = {r.name: r.modules for r in REGISTRY}


def _deferred(name: str, module_name: str) -> Hook:
    """The hook of integration ``name`` for ``module_name``, its module imported when it runs."""

    def hook(module: ModuleType) -> Iterable[PatchSpec]:
        integration = importlib.import_module(f"{__name__}.{name}")
        found: Iterable[PatchSpec] = integration.HOOKS[module_name](module)
        return found

    return hook


def _hooks(enabled: Sequence[str]) -> dict[str, list[tuple[str, Hook]]]:
    """Module name -> [(integration, hook)] for the enabled integrations."""
    table: dict[str, list[tuple[str, Hook]]] = {}
    for name in enabled:
        if name in WATCHES:
            for module_name in WATCHES[name]:
                table.setdefault(module_name, []).append((name, _deferred(name, module_name)))
            continue
        integration = importlib.import_module(f"{__name__}.{name}")  # one WATCHES does not know
        for module_name, hook in integration.HOOKS.items():
            table.setdefault(module_name, []).append((name, hook))
    return table


class Watcher:
    """Runs the hooks of a module right after the import system executes it: the callback the
    tracer's one import finder (``tracer._core.imports.watch``) calls for each watched module."""

    def __init__(self, hooks: dict[str, list[tuple[str, Hook]]], apply: Apply) -> None:
        self.hooks = hooks
        self.apply = apply
        self.active = True

    def run_hooks(self, module: ModuleType) -> None:
        if self.active:
            run_hooks(module, self.hooks.get(module.__name__, ()), self.apply)


def run_hooks(module: ModuleType, hooks: Iterable[tuple[str, Hook]], apply: Apply) -> None:
    """Run each integration's hook for ``module``, unless the installed version of its library
    is one it does not support; a failure skips the integration, logged once (``states``)."""
    for name, hook in hooks:
        try:
            why = None if name == "core" else states.unsupported(name)
        except Exception as exc:  # reading the version must never stop the import
            why = None
            _warn_once(f"integration {name}: its library's version unread: {exc!r}")
        if why is not None:
            states.record(name, states.UNSUPPORTED, f"{why}: not patched")
            _warn_once(f"integration {name} not patched: {why}")
            continue
        try:
            apply(list(hook(module)))
        except Exception as exc:
            states.record(name, states.FAILED, f"skipped for {module.__name__}: {exc!r}")
            _warn_once(f"integration {name} skipped for {module.__name__}: {exc!r}")
            continue
        record = REGISTRY_BY_NAME.get(name)
        if record is not None and record.own(module.__name__):
            states.record(name, states.ACTIVE, f"patched at the import of {module.__name__}")


#: What the installed watcher leaves out, and why (None: not instrumented).
_disabled: dict[str, str] | None = None


def report() -> list[states.State]:
    """Every integration's state in this process, and why (``states``)."""
    if _disabled is not None:
        return states.states(_disabled)
    reasons, _unknown = states.disabled_by(INTEGRATIONS, frozenset())
    return states.states(reasons, instrumented=False)


def install(
    disabled: frozenset[str] | Mapping[str, str],
    apply: Apply,
    core: Mapping[str, Hook] | None = None,
) -> Watcher:
    """Patch what is imported already, watch for the rest; returns the watcher to ``remove``.
    ``core``: module name -> hook of the patches that are no integration (asyncio, the pools,
    multiprocessing, subprocess: ``tracer._patching``), applied before any integration's.
    ``disabled``: the names to leave out, or (``disabled()``) each with the setting that does."""
    global _disabled
    _disabled = (
        dict(disabled) if isinstance(disabled, Mapping) else dict.fromkeys(disabled, "instrument()")
    )
    hooks: dict[str, list[tuple[str, Hook]]] = {
        module_name: [("core", hook)] for module_name, hook in (core or {}).items()
    }
    for module_name, found in _hooks([n for n in INTEGRATIONS if n not in disabled]).items():
        hooks.setdefault(module_name, []).extend(found)
    watcher = Watcher(hooks, apply)
    for module_name in hooks:
        imports.watch(module_name, watcher.run_hooks)
    for module_name, module_hooks in hooks.items():
        module = sys.modules.get(module_name)
        if module is not None:
            run_hooks(module, module_hooks, apply)
    return watcher


def remove(watcher: Watcher) -> None:
    global _disabled
    watcher.active = False
    _disabled = None
    states.forget()
    for module_name in watcher.hooks:
        imports.unwatch(module_name, watcher.run_hooks)

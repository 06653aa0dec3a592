"""Symmetric patches that carry the invocation context across threads, asyncio tasks, processes
and services.

More in docs/architecture.md, "tracer/_patching/__init__.py".
"""

from __future__ import annotations

import _thread
import sys

from tracer._core import forking

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # the patches load at the first instrument(): importing tracer loads none
    from collections.abc import Iterable
    from typing import Any, TypeAlias

    from tracer._patching import integrations
    from tracer.config import Config

__all__ = ["instrument", "instrumented", "uninstrument"]


#: (owner, name, original, replacement): what ``_apply`` set, and what ``_uninstall`` restores.
Patch: TypeAlias = "tuple[Any, str, Any, Any]"


# Reentrant: an integration's hook may run while instrument() holds it (a module imported
# already) or from any thread's import later on.
_lock = _thread.RLock()
_installed: list[Patch] = []
_watcher: integrations.Watcher | None = None


def _raw(owner: Any, name: str) -> Any:
    """The attribute as stored on its owner (a class's function, not a bound method)."""
    if isinstance(owner, type) and name in owner.__dict__:
        return owner.__dict__[name]
    return getattr(owner, name)


def _apply(patches: Iterable[integrations.PatchSpec]) -> None:
    with _lock:
        for owner, name, make in patches:
            original = _raw(owner, name)
            replacement = make(original)
            setattr(owner, name, replacement)
            _installed.append((owner, name, original, replacement))


#: The runtime's configuration (``use``): the integrations' options come from it, else from the
#: environment.
configured: Config | None = None


def use(config: Config) -> None:
    """Take the integrations' options (excluded URLs, headers to record) from ``config``."""
    global configured
    configured = config
    options = sys.modules.get("tracer._patching.integrations._options")
    if options is not None:
        options.reset()


def instrument(*, disable: Iterable[str] | None = None) -> None:
    """Patch threading, concurrent.futures, asyncio, multiprocessing and subprocess so sequences
    follow work across threads, tasks and processes, and the web servers and clients the program
    imports so they follow requests across services (docs/guide.md). ``disable`` names
    integrations to leave out (``tracer._patching.integrations.INTEGRATIONS``), as do
    ``INVOSEQ_DISABLED_INTEGRATIONS`` and ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``; an unknown
    name raises ValueError."""
    global _watcher
    from tracer._patching import contexts, integrations, logs, processes, tasks, threads

    disabled = integrations.disabled(disable)
    with _lock:
        _uninstall()
        _apply((*threads.PATCHES, *contexts.PATCHES))
        processes.install_fork_hooks()
        processes.set_fork_hooks(True)
        logs.install()
        # asyncio, thread and process pools, multiprocessing and subprocess: once imported
        core = {**threads.HOOKS, **tasks.HOOKS, **processes.HOOKS}
        _watcher = integrations.install(disabled, _apply, core)


def uninstrument() -> None:
    """Restore every patched object exactly."""
    with _lock:
        _uninstall()


def instrumented() -> bool:
    return bool(_installed)


def _uninstall() -> None:
    global _watcher
    if _watcher is not None:
        from tracer._patching import integrations

        integrations.remove(_watcher)
        _watcher = None
    logs = sys.modules.get("tracer._patching.logs")  # loaded by instrument()
    if logs is not None:
        logs.uninstall()
    processes = sys.modules.get("tracer._patching.processes")
    if processes is not None:
        processes.set_fork_hooks(False)
    while _installed:
        owner, name, original, _replacement = _installed.pop()
        setattr(owner, name, original)


def _after_fork_in_child() -> None:
    global _lock
    _lock = _thread.RLock()


forking.on_fork("patching", in_child=_after_fork_in_child)

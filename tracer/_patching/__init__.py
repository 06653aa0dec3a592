"""Symmetric patches that carry the invocation context across threads, asyncio tasks, processes
and services.

``instrument()`` installs every patch (uninstalling first, so calling it twice is harmless): the
thread, task and process patches at once, the integrations with web servers and clients
(``tracer._patching.integrations``) when the program imports their library, and the log record
factory (``tracer._patching.logs``). ``uninstrument()`` puts back exactly the objects that were
there. Each patch keeps its original.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tracer._patching import contexts, integrations, logs, processes, tasks, threads

__all__ = ["instrument", "instrumented", "uninstrument"]


@dataclass(frozen=True, slots=True)
class Patch:
    owner: Any
    name: str
    original: Any
    replacement: Any


# Reentrant: an integration's hook may run while instrument() holds it (a module imported
# already) or from any thread's import later on.
_lock = threading.RLock()
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
            _installed.append(Patch(owner, name, original, replacement))


def instrument(*, disable: Iterable[str] | None = None) -> None:
    """Patch threading, concurrent.futures, asyncio, multiprocessing and subprocess so sequences
    follow work across threads, tasks and processes, and the web servers and clients the program
    imports so they follow requests across services (docs/guide.md). ``disable`` names
    integrations to leave out (``tracer._patching.integrations.INTEGRATIONS``), as does
    ``INVOSEQ_DISABLED_INTEGRATIONS``; an unknown name raises ValueError."""
    global _watcher
    disabled = integrations.disabled_names(disable)
    with _lock:
        _uninstall()
        _apply((*threads.PATCHES, *tasks.PATCHES, *processes.PATCHES, *contexts.PATCHES))
        processes.set_fork_hooks(True)
        logs.install()
        _watcher = integrations.install(disabled, _apply)


def uninstrument() -> None:
    """Restore every patched object exactly."""
    with _lock:
        _uninstall()


def instrumented() -> bool:
    return bool(_installed)


def _uninstall() -> None:
    global _watcher
    if _watcher is not None:
        integrations.remove(_watcher)
        _watcher = None
    logs.uninstall()
    processes.set_fork_hooks(False)
    while _installed:
        patch = _installed.pop()
        setattr(patch.owner, patch.name, patch.original)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()


processes.install_fork_hooks()
os.register_at_fork(after_in_child=_after_fork_in_child)

"""Symmetric patches that carry the invocation context across threads, asyncio tasks and
processes.

``instrument()`` installs every patch (uninstalling first, so calling it twice is harmless) and
``uninstrument()`` puts back exactly the objects that were there. Each patch keeps its original.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from tracer._patching import processes, tasks, threads


@dataclass(frozen=True, slots=True)
class Patch:
    owner: Any
    name: str
    original: Any
    replacement: Any


_lock = threading.Lock()
_installed: list[Patch] = []


def _raw(owner: Any, name: str) -> Any:
    """The attribute as stored on its owner (a class's function, not a bound method)."""
    if isinstance(owner, type) and name in owner.__dict__:
        return owner.__dict__[name]
    return getattr(owner, name)


def instrument() -> None:
    """Patch threading, concurrent.futures, asyncio, multiprocessing and subprocess so sequences
    follow work across threads, tasks and processes (docs/guide.md)."""
    with _lock:
        _uninstall()
        for owner, name, make in (*threads.PATCHES, *tasks.PATCHES, *processes.PATCHES):
            original = _raw(owner, name)
            replacement = make(original)
            setattr(owner, name, replacement)
            _installed.append(Patch(owner, name, original, replacement))
        processes.set_fork_hooks(True)


def uninstrument() -> None:
    """Restore every patched object exactly."""
    with _lock:
        _uninstall()


def instrumented() -> bool:
    return bool(_installed)


def _uninstall() -> None:
    processes.set_fork_hooks(False)
    while _installed:
        patch = _installed.pop()
        setattr(patch.owner, patch.name, patch.original)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()


processes.install_fork_hooks()
os.register_at_fork(after_in_child=_after_fork_in_child)

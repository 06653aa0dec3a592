"""Symmetric patches that carry the invocation context across threads and asyncio tasks.

``instrument()`` installs every patch (uninstalling first, so calling it twice is harmless) and
``uninstrument()`` puts back exactly the objects that were there. Each patch keeps its original.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from tracer.patching import tasks, threads


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
    """Patch threading, concurrent.futures and asyncio so sequences follow work across threads
    and tasks (see docs/guide.md, "Threads and asyncio")."""
    with _lock:
        _uninstall()
        for owner, name, make in (*threads.PATCHES, *tasks.PATCHES):
            original = _raw(owner, name)
            replacement = make(original)
            setattr(owner, name, replacement)
            _installed.append(Patch(owner, name, original, replacement))


def uninstrument() -> None:
    """Restore every patched object exactly."""
    with _lock:
        _uninstall()


def instrumented() -> bool:
    return bool(_installed)


def _uninstall() -> None:
    while _installed:
        patch = _installed.pop()
        setattr(patch.owner, patch.name, patch.original)

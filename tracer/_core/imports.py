"""Work to do once the program imports a module, without importing it: ``when_imported`` (once),
and ``watch`` (every time the module is executed, until ``unwatch``: the integrations' hooks).

More in docs/architecture.md, "tracer/_core/imports.py".
"""

from __future__ import annotations

import _thread
import sys

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, TypeAlias

    Callback: TypeAlias = Callable[[ModuleType], None]

_lock = _thread.RLock()  # threading's RLock
_waiting: dict[str, list[Callback]] = {}
#: Called each time the module is executed (a reload too), until ``unwatch``.
_watching: dict[str, list[Callback]] = {}


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once module ``name`` is imported: now when it is already."""
    module = sys.modules.get(name)
    if module is not None and not _initialising(module):
        _run(module, [callback])
        return
    with _lock:
        _waiting.setdefault(name, []).append(callback)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def watch(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` each time module ``name`` is executed from now on (not for a
    module imported already: the caller handles that one)."""
    with _lock:
        _watching.setdefault(name, []).append(callback)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def unwatch(name: str, callback: Callback) -> None:
    """No longer call ``callback`` when ``name`` is executed."""
    with _lock:
        callbacks = _watching.get(name, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            _watching.pop(name, None)


def forget(name: str, callback: Callback) -> None:
    """No longer call ``callback`` for ``name`` (when it is still waiting)."""
    with _lock:
        callbacks = _waiting.get(name, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            _waiting.pop(name, None)


def _initialising(module: ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _run(module: ModuleType, callbacks: list[Callback]) -> None:
    for callback in callbacks:
        try:
            callback(module)
        except Exception as exc:
            import logging

            logging.getLogger("tracer").warning(
                "invoseq: after importing %s: %r", module.__name__, exc
            )


class _Watcher:
    """Finds nothing itself: for a watched name it asks the finders after it and wraps their
    loader, so the callbacks run once the module's code has run."""

    def __init__(self) -> None:
        self._finding = _thread._local()  # threading.local

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if (fullname not in _waiting and fullname not in _watching) or getattr(
            self._finding, "on", False
        ):
            return None
        import importlib.util

        self._finding.on = True
        try:
            spec = importlib.util.find_spec(fullname)  # the finders after this one
        except Exception:
            return None
        finally:
            self._finding.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
        return spec


class _Loader:
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:  # the module keeps its own loader afterwards
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        with _lock:
            callbacks = _waiting.pop(module.__name__, [])
            callbacks += _watching.get(module.__name__, ())
        _run(module, callbacks)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, get_resource_reader ...
        return getattr(self.loader, name)


_FINDER = _Watcher()

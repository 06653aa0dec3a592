"""Imports at the top are service work: what a module's code calls while the program imports it,
nothing current (its start-up, not a request), is one service sequence, ``invoseq.service.import``.

More in docs/architecture.md, "tracer/run/import_phase.py".
"""

from __future__ import annotations

import importlib.abc
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

from tracer._core import decorator, recorder, service, stack

#: The service sequence an import at the top is (``invoseq.service.import``).
IMPORT_PHASE = "import"


#: The tracer's own packages: their imports (the tracer's start-up) are never the program's.
OWN_PACKAGES = frozenset({"tracer", "cmr", "invoseq"})


def at_top() -> bool:
    """Whether an import made now is the program's start-up: the tracer recording and no
    invocation current on this thread. Never raises; registers nothing."""
    try:
        return decorator.recording() and not stack.active()
    except Exception as exc:
        recorder.internal_error(exc)
        return False


def wrap(spec: ModuleSpec) -> None:
    """Have ``spec``'s module run as the import phase's service work, if it is the program's,
    loaded from a file by a loader that executes it."""
    loader = spec.loader
    if (
        spec.has_location
        and loader is not None
        and hasattr(loader, "exec_module")
        and spec.name.partition(".")[0] not in OWN_PACKAGES
    ):
        spec.loader = ImportPhaseLoader(loader)


class DelegatingLoader(importlib.abc.Loader):
    """A loader in front of the real one (``_loader``), to which it delegates everything: the
    import hook's loaders are subclasses that change ``exec_module``."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        if name == "_loader":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        module: ModuleType | None = None if create is None else create(spec)
        return module


class ImportPhaseLoader(DelegatingLoader):
    """Runs ``exec_module`` as the import phase's service work, then puts the real loader back
    where the module keeps it."""

    def __repr__(self) -> str:
        return f"<invoseq import phase {self._loader!r}>"

    def exec_module(self, module: ModuleType) -> None:
        try:  # the module's own errors propagate unchanged
            service.run_at_top(IMPORT_PHASE, lambda: self._loader.exec_module(module))
        finally:
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._loader
            spec = getattr(module, "__spec__", None)
            if spec is not None and getattr(spec, "loader", None) is self:
                spec.loader = self._loader

"""Integrations with the libraries real services are built from, each patched only once the
program imports it.

Every integration is one module here with a ``HOOKS`` table: the name of a module of the library
(``"flask.app"``) and a function that takes that module once it is imported and returns the
patches to make, ``(owner, attribute, make_replacement)``, the same triples as the thread and
process patches. ``install`` patches the modules already imported and watches the import system
(a finder first on ``sys.meta_path``) for the others, so nothing of Flask is imported at start-up.
A hook that fails (a library version it does not know) skips its integration, logged once; the
host program never sees the failure.

``INTEGRATIONS`` lists every name; ``INVOSEQ_DISABLED_INTEGRATIONS=flask,requests`` or
``instrument(disable=[...])`` leaves some out. docs/guide.md, "Web services".
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any, Final, TypeVar

log = logging.getLogger("tracer")

#: Every integration, by the name ``disable`` takes, in the order hooks of one module apply.
INTEGRATIONS: Final = (
    "wsgi",
    "flask",
    "django",
    "asgi",
    "starlette",
    "fastapi",
    "aiohttp_server",
    "requests",
    "urllib3",
    "httpx",
    "aiohttp_client",
    "http_client",
    "rq",
    "celery",
    "grpc_server",
    "grpc_client",
    "asgiref",
    "anyio",
)
DISABLED_ENV: Final = "INVOSEQ_DISABLED_INTEGRATIONS"

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
    """The integrations to leave out: ``disable`` and the environment's list. An unknown name in
    ``disable`` raises; in the environment it is logged (a setting must not stop the program)."""
    names = set()
    for name in disable or ():
        if name not in INTEGRATIONS:
            raise UnknownIntegrationError(
                f"unknown integration {name!r}; known: {', '.join(INTEGRATIONS)}"
            )
        names.add(name)
    for name in os.environ.get(DISABLED_ENV, "").replace(" ", "").split(","):
        if not name:
            continue
        if name in INTEGRATIONS:
            names.add(name)
        else:
            _warn_once(f"{DISABLED_ENV}: unknown integration {name!r} ignored")
    return frozenset(names)


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("invoseq: %s", message)


#: The modules each integration hooks (the keys of its ``HOOKS``), so that an integration's own
#: module is imported only once the program imports its library (a test keeps them in step).
WATCHES: Final[dict[str, tuple[str, ...]]] = {
    "wsgi": ("wsgiref.handlers", "gunicorn.workers.base", "waitress.server", "werkzeug.serving"),
    "flask": ("flask.app",),
    "django": (
        "asgiref.sync",
        "django.core.handlers.base",
        "django.core.handlers.exception",
        "django.core.handlers.wsgi",
        "django.core.handlers.asgi",
    ),
    "asgi": ("uvicorn.config", "hypercorn.app_wrappers", "daphne.server"),
    "starlette": ("starlette.applications", "starlette.routing", "anyio._backends._asyncio"),
    "fastapi": ("fastapi.applications", "fastapi.routing", "anyio._backends._asyncio"),
    "aiohttp_server": ("aiohttp.web_app", "aiohttp.web_urldispatcher"),
    "requests": ("requests.sessions",),
    "urllib3": ("urllib3.connectionpool", "urllib3.poolmanager"),
    "httpx": ("httpx",),
    "aiohttp_client": ("aiohttp.client",),
    "http_client": ("http.client",),
    "rq": ("rq.queue", "rq.job", "rq.worker"),
    "celery": ("celery.signals",),
    "grpc_server": ("grpc", "grpc.aio"),
    "grpc_client": ("grpc", "grpc.aio"),
    "asgiref": ("asgiref.sync",),
    "anyio": ("anyio._backends._asyncio",),
}


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


class Watcher(importlib.abc.MetaPathFinder):
    """Runs the hooks of a module right after the import system executes it."""

    def __init__(self, hooks: dict[str, list[tuple[str, Hook]]], apply: Apply) -> None:
        self.hooks = hooks
        self.apply = apply
        self.active = True
        self._finding = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not self.active or fullname not in self.hooks or getattr(self._finding, "on", False):
            return None
        self._finding.on = True
        try:
            spec = importlib.util.find_spec(fullname)  # the finders after this one
        except Exception:
            return None
        finally:
            self._finding.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _HookedLoader(spec.loader, self)
        return spec

    def run_hooks(self, module: ModuleType) -> None:
        if self.active:
            run_hooks(module, self.hooks.get(module.__name__, ()), self.apply)


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, watcher: Watcher) -> None:
        self.loader = loader
        self.watcher = watcher

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:  # the module keeps its own loader afterwards
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        self.watcher.run_hooks(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, get_resource_reader ...
        return getattr(self.loader, name)


def run_hooks(module: ModuleType, hooks: Iterable[tuple[str, Hook]], apply: Apply) -> None:
    for name, hook in hooks:
        try:
            apply(list(hook(module)))
        except Exception as exc:
            _warn_once(f"integration {name} skipped for {module.__name__}: {exc!r}")


def install(
    disabled: frozenset[str], apply: Apply, core: Mapping[str, Hook] | None = None
) -> Watcher:
    """Patch what is imported already, watch for the rest; returns the watcher to ``remove``.
    ``core``: module name -> hook of the patches that are no integration (asyncio, the pools,
    multiprocessing, subprocess: ``tracer._patching``), applied before any integration's."""
    hooks: dict[str, list[tuple[str, Hook]]] = {
        module_name: [("core", hook)] for module_name, hook in (core or {}).items()
    }
    for module_name, found in _hooks([n for n in INTEGRATIONS if n not in disabled]).items():
        hooks.setdefault(module_name, []).extend(found)
    watcher = Watcher(hooks, apply)
    sys.meta_path.insert(0, watcher)
    for module_name, module_hooks in hooks.items():
        module = sys.modules.get(module_name)
        if module is not None:
            run_hooks(module, module_hooks, apply)
    return watcher


def remove(watcher: Watcher) -> None:
    watcher.active = False
    while watcher in sys.meta_path:
        sys.meta_path.remove(watcher)

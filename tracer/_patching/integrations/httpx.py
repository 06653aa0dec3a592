"""httpx: ``Client.send`` and ``AsyncClient.send`` are one invocation per request,
``"GET host/path"``.

More in docs/architecture.md, "tracer/_patching/integrations/httpx.py".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any, Final

from tracer._patching.integrations import Hook, PatchSpec, _clients, _http_sent

LIBRARY: Final = "httpx"


def _describe(request: Any) -> Callable[[], tuple[str, str]]:
    return lambda: (request.method, str(request.url))


def patch_send(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        client = _clients.begin(LIBRARY, _describe(request))
        if client is None:
            return original(self, request, *args, **kwargs)
        _clients.inject_request(client, request)
        return _clients.call(client, lambda: original(self, request, *args, **kwargs))

    return send


def patch_async_send(
    original: Callable[..., Coroutine[Any, Any, Any]],
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(original)
    async def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        client = _clients.begin(LIBRARY, _describe(request))
        if client is None:
            return await original(self, request, *args, **kwargs)
        _clients.inject_request(client, request)
        return await _clients.call_async(client, lambda: original(self, request, *args, **kwargs))

    return send


def patch_send_single(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _send_single_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        _http_sent.attempt(request.headers)
        return original(self, request, *args, **kwargs)

    return _send_single_request


def patch_async_send_single(
    original: Callable[..., Coroutine[Any, Any, Any]],
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(original)
    async def _send_single_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        _http_sent.attempt(request.headers)
        return await original(self, request, *args, **kwargs)

    return _send_single_request


def _hook(module: ModuleType) -> list[PatchSpec]:
    _clients.require(module.Client, "send", ("self", "request"))
    _clients.require(module.AsyncClient, "send", ("self", "request"))
    specs: list[PatchSpec] = [
        (module.Client, "send", patch_send),
        (module.AsyncClient, "send", patch_async_send),
    ]
    try:  # private: a version without it keeps one hand-off for every redirect
        _clients.require(module.Client, "_send_single_request", ("self", "request"))
        _clients.require(module.AsyncClient, "_send_single_request", ("self", "request"))
    except (KeyError, TypeError, RuntimeError):
        return specs
    specs.append((module.Client, "_send_single_request", patch_send_single))
    specs.append((module.AsyncClient, "_send_single_request", patch_async_send_single))
    return specs


HOOKS: dict[str, Hook] = {"httpx": _hook}

"""urllib3: ``PoolManager.urlopen`` and ``HTTPConnectionPool.urlopen`` are one invocation per
request, ``"GET host/path"``.

More in docs/architecture.md, "tracer/_patching/integrations/urllib3.py".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tracer._core import recorder
from tracer._patching.integrations import Hook, PatchSpec, _clients
from tracer._patching.integrations._http_sent import ClientRequest

LIBRARY: Final = "urllib3"
#: ``HTTPConnectionPool.urlopen(method, url, body, headers, ...)``: where ``headers`` is in the
#: positional arguments after ``url`` (urllib3's own retries pass it positionally).
_HEADERS_AT: Final = 1


def _with_headers(
    client: ClientRequest,
    default: Callable[[], Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    positional: bool,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments with the headers replaced by a copy carrying the hand-off (unchanged when
    that fails). ``default()``: the headers the library sends when the call names none."""
    try:
        at = positional and len(args) > _HEADERS_AT
        given = args[_HEADERS_AT] if at else kwargs.get("headers")
        headers = _clients.copy_headers(default() if given is None else given)
        _clients.inject(client, headers)
        if at:
            return (*args[:_HEADERS_AT], headers, *args[_HEADERS_AT + 1 :]), kwargs
        return args, {**kwargs, "headers": headers}
    except Exception as exc:
        recorder.internal_error(exc)
        return args, kwargs


def patch_pool_urlopen(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def urlopen(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        client = _clients.begin(
            LIBRARY, lambda: (method, _clients.target_url(self.scheme, self.host, self.port, url))
        )
        if client is None:
            return original(self, method, url, *args, **kwargs)
        args, kwargs = _with_headers(client, lambda: self.headers, args, kwargs, positional=True)
        return _clients.call(client, lambda: original(self, method, url, *args, **kwargs))

    return urlopen


def patch_manager_urlopen(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def urlopen(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        client = _clients.begin(LIBRARY, lambda: (method, url))
        if client is None:
            return original(self, method, url, *args, **kwargs)
        # The manager sends its default headers only when the call names none at all (a pool
        # the manager made has no headers of its own for an explicit None).
        named = "headers" in kwargs
        args, kwargs = _with_headers(
            client, lambda: None if named else self.headers, args, kwargs, positional=False
        )
        return _clients.call(client, lambda: original(self, method, url, *args, **kwargs))

    return urlopen


def _pool_hook(module: ModuleType) -> list[PatchSpec]:
    pool = module.HTTPConnectionPool
    _clients.require(pool, "urlopen", ("self", "method", "url", "body", "headers"))
    return [(pool, "urlopen", patch_pool_urlopen)]


def _manager_hook(module: ModuleType) -> list[PatchSpec]:
    manager = module.PoolManager
    _clients.require(manager, "urlopen", ("self", "method", "url"))
    return [(manager, "urlopen", patch_manager_urlopen)]


HOOKS: dict[str, Hook] = {
    "urllib3.connectionpool": _pool_hook,
    "urllib3.poolmanager": _manager_hook,
}

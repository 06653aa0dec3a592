"""aiohttp's client: ``ClientSession._request`` is one invocation per request,
``"GET host/path"``.

More in docs/architecture.md, "tracer/_patching/integrations/aiohttp_client.py".
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any, Final

from tracer import propagation
from tracer._core import recorder
from tracer._patching.integrations import Hook, PatchSpec, _clients, _http_sent
from tracer._patching.integrations._http_sent import ClientRequest

LIBRARY: Final = "aiohttp"

Request = Callable[..., Coroutine[Any, Any, Any]]


def _url(session: Any, str_or_url: Any) -> str:
    """The URL the session sends to (joined to its ``base_url``)."""
    build = getattr(session, "_build_url", None)
    return str(build(str_or_url) if callable(build) else str_or_url)


def _with_headers(
    client: ClientRequest, session: Any, kwargs: dict[str, Any], multidict: type[Any]
) -> dict[str, Any]:
    """``kwargs`` with ``headers`` replaced by a copy carrying the hand-off (unchanged when that
    fails)."""
    try:
        defaults = getattr(session, "_default_headers", None)
        if defaults and propagation.HEADERS.get(defaults, propagation.TRACEPARENT):
            return kwargs  # the session propagates a traceparent of the caller's
        headers = multidict(kwargs.get("headers") or ())
        _clients.inject(client, headers)
        return {**kwargs, "headers": headers}
    except Exception as exc:
        recorder.internal_error(exc)
        return kwargs


def patch_request(original: Request, multidict: type[Any]) -> Request:
    @functools.wraps(original)
    async def _request(self: Any, method: str, str_or_url: Any, *args: Any, **kwargs: Any) -> Any:
        client = _clients.begin(LIBRARY, lambda: (method, _url(self, str_or_url)))
        if client is None:
            return await original(self, method, str_or_url, *args, **kwargs)
        kwargs = _with_headers(client, self, kwargs, multidict)
        return await _clients.call_async(
            client, lambda: original(self, method, str_or_url, *args, **kwargs)
        )

    return _request


def patch_send(original: Request) -> Request:
    @functools.wraps(original)
    async def send(self: Any, *args: Any, **kwargs: Any) -> Any:
        _http_sent.attempt(self.headers)  # a redirect: a hand-off of its own
        return await original(self, *args, **kwargs)

    return send


def _hook(module: ModuleType) -> list[PatchSpec]:
    from multidict import CIMultiDict  # aiohttp's own dependency, imported with it

    session = module.ClientSession
    function = _clients.require(session, "_request", ("self", "method", "str_or_url"))
    if "headers" not in _clients.parameters_of(function):
        raise RuntimeError("ClientSession._request takes no headers argument")
    specs: list[PatchSpec] = [
        (session, "_request", lambda original: patch_request(original, CIMultiDict))
    ]
    request = getattr(module, "ClientRequest", None)
    send = getattr(request, "__dict__", {}).get("send")
    if inspect.iscoroutinefunction(send):  # else every redirect keeps the first hand-off
        specs.append((request, "send", patch_send))
    return specs


HOOKS: dict[str, Hook] = {"aiohttp.client": _hook}

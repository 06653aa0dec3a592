"""Integration: the aiohttp web server. Each request an application serves is one invocation,
named by its method and the route's canonical template (``"aiohttp.GET /price/{item}"``), the
handler a traced child.

More in docs/architecture.md, "tracer/_patching/integrations/aiohttp_server.py".
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any, Final

from tracer._core import context, recorder
from tracer._patching.integrations import (
    Hook,
    PatchSpec,
    _endpoints,
    _http,
    _http_served,
    installed,
    mark,
)

FRAMEWORK: Final = "aiohttp"

#: The request ``Application._handle`` is serving in this context.
_serving: contextvars.ContextVar[_http_served.ServerRequest | None] = contextvars.ContextVar(
    "invoseq_aiohttp_serving", default=None
)
_serving_set, _serving_reset = context.guarded(_serving)
_set = context.set_current
_reset = context.reset_current

Handle = Callable[[Any, Any], Awaitable[Any]]


def patch_handle(http_exception: type[BaseException], owner: type) -> Callable[[Handle], Handle]:
    """``make_replacement`` of ``owner._handle`` (``Application``); ``http_exception`` is
    ``web.HTTPException``, which carries the status aiohttp answers with. A server set up while
    instrumented holds the bound replacement: after ``uninstrument`` it passes through."""

    def make(original: Handle) -> Handle:
        async def _handle(self: Any, request: Any) -> Any:
            if not installed(owner, "_handle"):  # uninstrumented since
                return await original(self, request)
            served = _http_served.begin_server(
                FRAMEWORK,
                str(request.method),
                str(request.path),
                request.headers,
                url=lambda: str(request.url),
            )
            if served is None:
                return await original(self, request)
            token = _set(served.value)
            serving = _http_served.serving()
            current = _serving_set(served)
            try:
                response = await original(self, request)
            except http_exception as exc:
                status = getattr(exc, "status", None)
                status = status if isinstance(status, int) else 500
                served.finish(status, exc if status >= 500 else None)
                raise
            except TimeoutError as exc:
                served.finish(504, exc)
                raise
            except Exception as exc:
                served.finish(500, exc)
                raise
            except BaseException as exc:  # cancelled: the client went away
                served.finish(None, exc)
                raise
            finally:
                _serving_reset(current)
                _http_served.done_serving(serving)
                _reset(token)
            served.response_headers(getattr(response, "headers", {}).items())
            served.finish(_http.status_of(response))
            return response

        _handle.__qualname__ = getattr(original, "__qualname__", "_handle")
        _handle.__doc__ = original.__doc__
        return mark(_handle)

    return make


def patch_handler(original: property) -> property:
    """``make_replacement`` of the ``UrlMappingMatchInfo.handler`` property."""
    getter = original.fget
    if getter is None:
        raise TypeError("UrlMappingMatchInfo.handler has no getter")

    def handler(self: Any) -> Any:
        found = getter(self)
        served = _serving.get()
        if served is None:
            return found
        try:
            resource = getattr(self.route, "resource", None)
            if resource is None:  # a SystemRoute: 404, 405
                return found
            served.name(str(resource.canonical))
            return _endpoints.endpoint(found)
        except Exception as exc:
            recorder.internal_error(exc)
            return found

    return property(handler, original.fset, original.fdel, original.__doc__)


def _web_app(module: ModuleType) -> list[PatchSpec]:
    from aiohttp import web_exceptions

    application = module.Application
    if not callable(getattr(application, "_handle", None)):
        raise TypeError("aiohttp.web_app.Application has no _handle")
    return [(application, "_handle", patch_handle(web_exceptions.HTTPException, application))]


def _web_urldispatcher(module: ModuleType) -> list[PatchSpec]:
    match_info = module.UrlMappingMatchInfo
    handler = vars(match_info).get("handler")
    if not isinstance(handler, property):
        raise TypeError(f"UrlMappingMatchInfo.handler is not a property: {handler!r}")
    return [(match_info, "handler", patch_handler)]


HOOKS: dict[str, Hook] = {
    "aiohttp.web_app": _web_app,
    "aiohttp.web_urldispatcher": _web_urldispatcher,
}

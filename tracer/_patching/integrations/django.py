"""Integration: Django, its WSGI and ASGI handlers. Each request is one invocation named by its
URL pattern (``"django.GET /price/<str:item>"``), the view a traced child, an exception Django turns
into a 500 an error; under a WSGI server or an ASGI middleware that measures already, the request is
measured once.

More in docs/architecture.md, "tracer/_patching/integrations/django.py".
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from tracer._core import handoff
from tracer._patching.integrations import Hook, PatchSpec, _http_served, _served, asgi, wsgi

if TYPE_CHECKING:
    pass

FRAMEWORK: Final = "django"


def _holder(request: Any) -> Any:
    """The environ (WSGIRequest) or scope (ASGIRequest) a Django request was built from."""
    holder = getattr(request, "environ", None)
    return holder if isinstance(holder, dict) else getattr(request, "scope", None)


def _wsgi_handler(module: ModuleType) -> list[PatchSpec]:
    handler = module.WSGIHandler
    if not inspect.isfunction(vars(handler).get("__call__")):
        raise TypeError("django WSGIHandler defines no __call__")

    return [(handler, "__call__", wsgi.measuring(FRAMEWORK))]


def _asgi_handler(module: ModuleType) -> list[PatchSpec]:
    handler = module.ASGIHandler
    if not inspect.iscoroutinefunction(vars(handler).get("__call__")):
        raise TypeError("django ASGIHandler defines no coroutine __call__")

    def make(original: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        async def measured(
            self: Any, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send
        ) -> None:
            served = _begin_asgi(scope)
            if served is None:
                return await original(self, scope, receive, send)

            async def sending(message: asgi.Message) -> None:
                if message.get("type") == "http.response.start":
                    status = message.get("status")
                    served.status = status if isinstance(status, int) else None
                    served.request.response_headers(asgi.decoded(message.get("headers") or ()))
                await send(message)

            with _served.attached(served):
                await original(self, scope, receive, sending)
            served.finish()
            return None

        return functools.update_wrapper(measured, original)

    return [(handler, "__call__", make)]


def _begin_asgi(scope: asgi.Scope) -> _served.Served | None:
    """The request of an HTTP scope, begun and kept in the scope for the ASGI integrations too
    (``asgi.REQUEST_KEY``); None when not measured here: an outer ``asgi.InvoseqMiddleware``
    measures it (Django names it all the same), or the tracer is not recording."""
    if scope.get("type") != "http" or _served.KEY in scope:
        return None
    outer = scope.get(asgi.REQUEST_KEY)
    if isinstance(outer, _http_served.ServerRequest):
        scope[_served.KEY] = _served.Served(outer)  # named here, finished by its middleware
        return None
    verb = str(scope.get("method") or "GET")
    served = _served.begin(
        scope,
        FRAMEWORK,
        verb,
        str(scope.get("path", "")),
        asgi.HEADERS,
        url=lambda: asgi.request_url(scope),
    )
    if served is not None:
        scope[asgi.REQUEST_KEY] = served.request
    return served


def _base_handler(module: ModuleType) -> list[PatchSpec]:
    handler = module.BaseHandler
    if not callable(getattr(handler, "resolve_request", None)):
        raise TypeError("django BaseHandler has no resolve_request()")
    # Whether Django awaits a view: asgiref's test, which knows views only marked as coroutines.
    is_async: Callable[[Any], bool] = getattr(
        module, "iscoroutinefunction", inspect.iscoroutinefunction
    )

    def make(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def resolve_request(self: Any, request: Any) -> Any:
            served = _served.served_in(_holder(request))
            if served is None:
                return original(self, request)
            try:
                match = original(self, request)
            except BaseException:
                served.name(FRAMEWORK, None)  # no route: a 404 of Django's
                raise
            served.name(FRAMEWORK, _route(request, match))
            view = getattr(match, "func", None)
            if view is None:
                return match
            traced = _served.trace_view(view, is_async)
            if traced is view:
                return match
            return _handed(match, traced)

        return functools.update_wrapper(resolve_request, original)

    return [(handler, "resolve_request", make)]


def _handed(match: Any, view: Any) -> Any:
    """A copy of ``match`` calling ``view`` for the handler, which unpacks it as ``(func, args,
    kwargs)``; ``request.resolver_match`` keeps the view itself. (``copy`` refuses: a
    ResolverMatch forbids pickling.)"""
    try:
        handed = object.__new__(type(match))
        handed.__dict__.update(vars(match))
        handed.func = view
        return handed
    except (TypeError, AttributeError):  # no __dict__: what the handler unpacks
        return (view, match.args, match.kwargs)


def _route(request: Any, match: Any) -> str | None:
    """``"/price/<str:item>"``: the match's route, after the templates of the ASGI mounts the
    request went through (``asgi.PREFIX_KEY``)."""
    route = getattr(match, "route", None)
    if not isinstance(route, str):
        return None
    scope = getattr(request, "scope", None)
    prefix = scope.get(asgi.PREFIX_KEY, "") if isinstance(scope, dict) else ""
    return f"{prefix}/{route.removeprefix('^')}"


def _exception(module: ModuleType) -> list[PatchSpec]:
    if not callable(getattr(module, "response_for_exception", None)):
        raise TypeError("django has no response_for_exception()")

    def make(original: Callable[[Any, Exception], Any]) -> Callable[[Any, Exception], Any]:
        def keeping(request: Any, exc: Exception) -> Any:
            served = _served.served_in(_holder(request))
            if served is not None:
                served.exception = exc
            return original(request, exc)

        return functools.update_wrapper(keeping, original)

    return [(module, "response_for_exception", make)]


def _asgiref_sync(module: ModuleType) -> list[PatchSpec]:
    """asgiref's ``sync_to_async`` runs each call in an executor thread inside a context it copied
    itself: marked, the thread patch adds no hop node for it (``handoff.carries_context``)."""
    owner = module.SyncToAsync
    if not callable(vars(owner).get("thread_handler")):
        raise TypeError("asgiref.sync.SyncToAsync has no thread_handler")
    return [(owner, "thread_handler", _carrying_context)]


def _carrying_context(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def thread_handler(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    setattr(thread_handler, handoff.CARRIES_CONTEXT_MARK, True)
    return thread_handler


HOOKS: dict[str, Hook] = {
    "asgiref.sync": _asgiref_sync,
    "django.core.handlers.base": _base_handler,
    "django.core.handlers.exception": _exception,
    "django.core.handlers.wsgi": _wsgi_handler,
    "django.core.handlers.asgi": _asgi_handler,
}

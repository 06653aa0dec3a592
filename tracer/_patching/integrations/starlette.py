"""Integration: Starlette. Each HTTP request an application serves is one invocation, named by its
method and route template (``"starlette.GET /price/{item}"``), the endpoint a traced child.

More in docs/architecture.md, "tracer/_patching/integrations/starlette.py".
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any, Final

from tracer._core import recorder
from tracer._patching.integrations import (
    PATCH_MARK,
    Hook,
    PatchSpec,
    _endpoints,
    _http_served,
    asgi,
    mark,
)

FRAMEWORK: Final = "starlette"
_UNTRACED: Final = object()

Handle = Callable[[Any, asgi.Scope, asgi.Receive, asgi.Send], Any]


def wrap_stack(
    framework: str, owner: type
) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """``make_replacement`` of ``owner.build_middleware_stack``: the stack wrapped in the
    middleware measuring ``framework``'s requests (``"fastapi"`` for a FastAPI application that
    inherits Starlette's, as releases of FastAPI that do not override it do). A stack built while
    instrumented stays with its application: after ``uninstrument`` its middleware passes every
    request through (the patch is no longer in place), and measures again if it is put back."""

    def make(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def build_middleware_stack(self: Any) -> Any:
            named = framework
            if any(c.__module__.startswith("fastapi.") for c in type(self).__mro__):
                named = "fastapi"
            return _Installed(original(self), framework=named, owner=owner)

        copy_names(build_middleware_stack, original)
        return mark(build_middleware_stack)

    return make


class _Installed(asgi.InvoseqMiddleware):
    """The middleware a patched ``build_middleware_stack`` put in place: it measures while
    ``owner.build_middleware_stack`` is patched (by any ``instrument()``), else passes through."""

    def __init__(self, app: asgi.ASGIApp, *, framework: str, owner: type) -> None:
        super().__init__(app, framework=framework)
        self.owner = owner
        self.patch: tuple[Mapping[str, Any], str] = (vars(owner), "build_middleware_stack")

    def __call__(  # type: ignore[override]  # a coroutine still, but not always one of ours
        self, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send
    ) -> Awaitable[None]:
        """The application's own middleware stack, unless this layer measures the request: a
        request a server's layer measures already (or any, after ``uninstrument``) is the inner
        stack's coroutine itself, so that this layer adds no frame to each of the request's
        steps. Servers never see this object (the application is what they inspect)."""
        owner, name = self.patch
        if not getattr(owner.get(name), PATCH_MARK, False):  # measuring(), inline
            return self.app(scope, receive, send)
        request = scope.get(asgi.REQUEST_KEY)
        if request is not None and scope.get("type") == "http":
            # asgi.refine(), inline: a server's layer began it
            if (
                isinstance(request, _http_served.ServerRequest)
                and request.framework == asgi.FRAMEWORK
                and not request.call.opened
            ):
                request.framework = self.framework
            return self.app(scope, receive, send)
        return super().__call__(scope, receive, send)


def copy_names(replacement: Any, original: Any) -> None:
    """Give a replacement the names of the function it replaces (tracebacks, ``repr``)."""
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        if hasattr(original, name):
            setattr(replacement, name, getattr(original, name))


async def _probe(request: Any) -> None:
    """An endpoint to learn from (``patch_route_handle``), never called."""


class _WithApp:
    """A route seen through with another ``app``: the original ``Route.handle`` runs it as the
    route's own (the method check first, as always)."""

    __slots__ = ("_route", "app")

    def __init__(self, route: Any, app: Any) -> None:
        self._route = route
        self.app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self._route, name)


def patch_route_handle(request_response: Callable[[Any], Any]) -> Callable[[Handle], Handle]:
    """``make_replacement`` of ``Route.handle``; ``request_response`` is Starlette's own, which
    builds the application running the traced endpoint."""
    # The code of the applications request_response makes: a route whose app runs it calls its
    # endpoint as request_response(endpoint) would, so request_response(traced) can stand in.
    app_code = getattr(request_response(_probe), "__code__", None)
    if app_code is None:
        raise TypeError("starlette.routing.request_response does not return a function")
    # The route's own application -> the one running its endpoint traced (_UNTRACED: none).
    traced_apps: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def traced_app(route: Any) -> Any:
        """The route's application with its endpoint traced, or None to run the route's own."""
        app = getattr(route, "app", None)
        if getattr(app, "__code__", None) is not app_code:
            return None  # an ASGI endpoint, a route's own middleware, FastAPI's APIRoute
        try:
            found = traced_apps.get(app)
            if found is None:
                endpoint = route.endpoint
                traced = _endpoints.endpoint(endpoint)
                found = _UNTRACED if traced is endpoint else request_response(traced)
                traced_apps[app] = found
            return None if found is _UNTRACED else found
        except Exception as exc:
            recorder.internal_error(exc)
            return None

    def make(original: Handle) -> Handle:
        async def handle(
            self: Any, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send
        ) -> None:
            request = scope.get(asgi.REQUEST_KEY)
            if request is not None and scope.get("type") == "http":
                if not (isinstance(request, _http_served.ServerRequest) and request.call.opened):
                    asgi.name_route(scope, getattr(self, "path_format", None))
                # traced_app's first check, inline: FastAPI's routes are not for it
                route_app = getattr(self, "app", None)
                app = traced_app(self) if getattr(route_app, "__code__", None) is app_code else None
                if app is not None:
                    await original(_WithApp(self, app), scope, receive, send)
                    return
            await original(self, scope, receive, send)

        copy_names(handle, original)
        return handle

    return make


def patch_mount_handle(original: Handle) -> Handle:
    async def handle(self: Any, scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        if scope.get(asgi.REQUEST_KEY) is not None:
            template = getattr(self, "path_format", None)
            if isinstance(template, str):
                prefix = str(scope.get(asgi.PREFIX_KEY, "")) + template.removesuffix("/{path}")
                scope[asgi.PREFIX_KEY] = prefix
                scope[asgi.FALLBACK_KEY] = prefix + "/{path}"
        await original(self, scope, receive, send)

    copy_names(handle, original)
    return handle


def _applications(module: ModuleType) -> list[PatchSpec]:
    starlette = module.Starlette
    return [(starlette, "build_middleware_stack", wrap_stack(FRAMEWORK, starlette))]


def _routing(module: ModuleType) -> list[PatchSpec]:
    request_response = module.request_response
    if not callable(request_response):
        raise TypeError(f"starlette.routing.request_response is not callable: {request_response!r}")
    return [
        (module.Route, "handle", patch_route_handle(request_response)),
        (module.Mount, "handle", patch_mount_handle),
    ]


HOOKS: dict[str, Hook] = {
    "starlette.applications": _applications,
    "starlette.routing": _routing,
    "anyio._backends._asyncio": _endpoints.detach_anyio_workers,
}

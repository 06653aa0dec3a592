"""Integration: ASGI. ``InvoseqMiddleware`` measures each HTTP request an ASGI application serves;
the Starlette and FastAPI integrations put it outermost in every application's middleware stack,
and a program may wrap any other ASGI application in it by hand::

    app = InvoseqMiddleware(app)

More in docs/architecture.md, "tracer/_patching/integrations/asgi.py".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from types import ModuleType
from typing import Any, Final

from opentelemetry.propagators.textmap import Getter

from tracer import propagation
from tracer._core import context, recorder
from tracer._core import service as _service
from tracer._patching.integrations import (
    PATCH_MARK,
    Hook,
    PatchSpec,
    _http,
    _http_served,
    _options,
)
from tracer._patching.integrations._http import sending_get as _sending_get
from tracer._patching.integrations._http import sending_reset as _sending_reset
from tracer._patching.integrations._http import sending_set as _sending_set
from tracer._patching.integrations._server_hooks import run_as_service, wrap_after

__all__ = [
    "HEADERS",
    "PREFIX_KEY",
    "REQUEST_KEY",
    "InvoseqMiddleware",
    "ServerMiddleware",
    "decoded",
    "name_route",
    "refine",
    "request_url",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FRAMEWORK: Final = "asgi"
#: The scope key holding the request's ``_http_served.ServerRequest``.
REQUEST_KEY: Final = "invoseq.request"
#: The scope key marking a lifespan measured already (by an outer middleware).
SERVICE_KEY: Final = "invoseq.service"
#: The scope key holding the route templates of the mounts matched so far (``"/api/{version}"``).
PREFIX_KEY: Final = "invoseq.prefix"
#: The scope key holding the route to name the request by when nothing more specific matched
#: (a mount's ``"/static/{path}"``).
FALLBACK_KEY: Final = "invoseq.fallback_route"

_set = context.set_current
_reset = context.reset_current


class ScopeHeaders(Getter[Scope]):
    """An ASGI scope's ``headers``: ``(name, value)`` byte pairs, one pair per header line (two
    ``tracestate`` lines are two items); names match in any case."""

    def get(self, carrier: Scope, key: str) -> list[str] | None:
        try:
            wanted = key.encode("ascii")  # compared as bytes: no name decoded per request
        except UnicodeEncodeError:  # a header's name is an ASCII token: none is this key
            return None
        found = [
            value.decode("latin-1")
            for name, value in carrier.get("headers") or ()
            if name.lower() == wanted
        ]
        return found or None

    def keys(self, carrier: Scope) -> list[str]:
        return [name.decode("latin-1") for name, _ in carrier.get("headers") or ()]


HEADERS: Final = ScopeHeaders()


def decoded(headers: Any) -> Iterator[tuple[str, str]]:
    """An ASGI message's headers as text, decoded as they are read: not at all when no header
    is captured (``_options``), as none is by default."""
    for name, value in headers:
        yield name.decode("latin-1"), value.decode("latin-1")


def request_url(scope: Scope) -> str:
    """The request's full URL: its ``host`` header (else the scope's ``server``), root path,
    path and query."""
    host = next(
        (v.decode("latin-1") for n, v in scope.get("headers") or () if n.lower() == b"host"), ""
    )
    server = scope.get("server")
    if not host and server:
        host = f"{server[0]}:{server[1]}" if server[1] is not None else str(server[0])
    path = str(scope.get("root_path") or "") + str(scope.get("path") or "")
    query = scope.get("query_string") or b""
    query_text = query.decode("latin-1") if isinstance(query, bytes) else str(query)
    return _http_served.full_url(str(scope.get("scheme") or "http"), host, path, query_text)


def name_route(scope: Scope, route: str | None) -> None:
    """Name the scope's request by ``route`` (a template, ``"/price/{item}"``), after the mounts it
    went through; the first name wins. Nothing without a request, never raises."""
    request = scope.get(REQUEST_KEY)
    if not isinstance(request, _http_served.ServerRequest) or not route or request.call.opened:
        return
    try:
        request.name(str(scope.get(PREFIX_KEY, "")) + route)
    except Exception as exc:
        recorder.internal_error(exc)


class InvoseqMiddleware:
    """ASGI middleware: each HTTP request one invocation, named ``"GET /price/{item}"`` (module
    docstring). ``framework`` names the module of the invocations (``"starlette"``); ``app`` is the
    application it wraps (frameworks walk their middleware stacks through it)."""

    def __init__(self, app: ASGIApp, *, framework: str = FRAMEWORK) -> None:
        self.app = app
        self.framework = framework
        #: A patch's layer: the namespace of the class the patch is in and the patched name;
        #: it measures only while that attribute is still a replacement an integration made
        #: (``installed``). None: always.
        self.patch: tuple[Mapping[str, Any], str] | None = None

    def measuring(self) -> bool:
        """Whether this layer measures now (a patch's layer only while its patch is in place):
        checked here rather than in a subclass's ``__call__``, so that a request goes through one
        coroutine of each layer, not two."""
        patch = self.patch
        return patch is None or bool(getattr(patch[0].get(patch[1]), PATCH_MARK, False))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        patch = self.patch  # measuring(), inline: every request asks
        if (
            (patch is not None and not getattr(patch[0].get(patch[1]), PATCH_MARK, False))
            or scope.get("type") != "http"
            or REQUEST_KEY in scope
        ):
            await self._unmeasured(scope, receive, send)
            return
        # Every request comes this way: what _http_served.begin_server does, with the options read
        # once and the headers scanned once for a traceparent (extracted only when there is one).
        options = _options.current()
        patterns = options.excluded
        pattern = patterns.get(self.framework, patterns["*"])
        if pattern is not None and _options.excluded(self.framework, lambda: request_url(scope)):
            excluding = _http.excluding_set(True)
            try:
                await self.app(scope, receive, send)
            finally:
                _http.excluding_reset(excluding)
            return
        request = _http_served.begin_request(
            self.framework,
            str(scope.get("method", "")).upper(),
            str(scope.get("path", "")),
            _remote(scope),
        )
        if request is None:
            await self.app(scope, receive, send)
            return
        if options.capturing_request:
            request.capture(_http.header_items(scope, HEADERS))
        # an outer layer's list excluded it, this framework's own list does not: traced here
        included = _http.excluding_set(False) if _http.excluding.get() else None
        scope[REQUEST_KEY] = request
        status: int | None = None
        capturing = options.capturing_response

        async def send_status(message: Message) -> None:
            nonlocal status
            if message.get("type") == "http.response.start":
                found = message.get("status")
                status = found if isinstance(found, int) else None
                if capturing:
                    request.response_headers(decoded(message.get("headers") or ()))
            await send(message)

        token = _set(request.call.value)
        serving = None if _sending_get() is None else _sending_set(None)
        try:
            await self.app(scope, receive, send_status)
        except BaseException as exc:
            _finish(request, scope, status, exc)
            raise
        finally:
            if serving is not None:
                _sending_reset(serving)
            _reset(token)
            if included is not None:
                _http.excluding_reset(included)
        _finish(request, scope, status, None)

    async def _unmeasured(self, scope: Scope, receive: Receive, send: Send) -> None:
        """What is not an HTTP request this layer measures: a lifespan (measured once, by the
        outermost layer), another kind of scope, a request an outer layer measures, any request
        while this layer's patch is not in place."""
        if not self.measuring() or scope.get("type") not in ("http", "lifespan"):
            await self.app(scope, receive, send)
        elif scope.get("type") == "lifespan":
            if SERVICE_KEY in scope:
                await self.app(scope, receive, send)
                return
            scope[SERVICE_KEY] = True
            await _service.run_async("asgi.lifespan", lambda: self.app(scope, receive, send))
        else:
            refine(scope, self.framework)  # inside a server's: the request becomes ours
            await self.app(scope, receive, send)


class ServerMiddleware(InvoseqMiddleware):
    """The middleware a server hook puts outermost: its requests are ``asgi``'s until a
    framework's middleware inside takes them (``refine``). It stays in the server's
    application, and measures only while the hook's patch is in place (``owner.name``)."""

    def __init__(self, app: ASGIApp, *, owner: type, name: str) -> None:
        super().__init__(app)
        self.owner = owner
        self.name = name
        self.patch = (vars(owner), name)


def _remote(scope: Scope) -> context.Current | None:
    """The context value the scope's ``traceparent`` header continues: its headers scanned once,
    extracted only when there is one (any case); None, never raising, for a scope the headers of
    which are not ASGI's."""
    try:
        for name, _ in scope.get("headers") or ():
            if len(name) == 11 and name.lower() == b"traceparent":
                return propagation.extract(scope, getter=HEADERS)
    except Exception as exc:
        recorder.internal_error(exc)
    return None


def refine(scope: Scope, framework: str) -> None:
    """A framework's middleware sees a request the plain ASGI middleware began (a server's, or
    one added by hand): the request becomes the framework's (its module), unless it is named
    already."""
    request = scope.get(REQUEST_KEY)
    if isinstance(request, _http_served.ServerRequest) and request.framework == FRAMEWORK:
        request.refine(framework)


def _measuring(owner: type, method: str) -> Callable[[Any], Any | None]:
    """What ``wrap_after`` puts in place of an application a server stored: the application in
    ``ServerMiddleware``, once."""

    def wrap(app: Any) -> Any | None:
        if isinstance(app, ServerMiddleware):
            return None
        return ServerMiddleware(app, owner=owner, name=method)

    return wrap


def _hypercorn(module: ModuleType) -> list[PatchSpec]:
    wrapper = module.ASGIWrapper
    return [wrap_after(wrapper, "__init__", "app", _measuring(wrapper, "__init__"))]


def _daphne(module: ModuleType) -> list[PatchSpec]:
    server = module.Server
    return [wrap_after(server, "__init__", "application", _measuring(server, "__init__"))]


def _hypercorn_loading(module: ModuleType) -> list[PatchSpec]:
    # the server's modules bind it by name after this module has run
    return [run_as_service(module, "load_application", "hypercorn.startup")]


def _daphne_loading(module: ModuleType) -> list[PatchSpec]:
    return [run_as_service(module, "import_by_path", "daphne.startup")]


def _uvicorn(module: ModuleType) -> list[PatchSpec]:
    config = module.Config
    specs = [wrap_after(config, "load", "loaded_app", _measuring(config, "load"))]
    if callable(config.__dict__.get("load_app")):
        # it imports the application: the calls its modules make at import time are
        # start-up's (uvicorn.run loads it once before the server, as load() does again)
        specs.append(run_as_service(config, "load_app", "uvicorn.startup"))
    return specs


def _finish(
    request: _http_served.ServerRequest, scope: Scope, status: int | None, exc: BaseException | None
) -> None:
    try:
        fallback = scope.get(FALLBACK_KEY)
        if isinstance(fallback, str) and not request.call.opened:
            request.name(fallback)
        request.finish(status, exc)
    except Exception as error:
        recorder.internal_error(error)


HOOKS: dict[str, Hook] = {
    "uvicorn.config": _uvicorn,
    "hypercorn.app_wrappers": _hypercorn,
    "hypercorn.utils": _hypercorn_loading,
    "daphne.server": _daphne,
    "daphne.utils": _daphne_loading,
}

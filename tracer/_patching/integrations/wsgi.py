"""Integration: WSGI. Each request a WSGI application serves is one invocation (``serve``), under
every server that runs one (wsgiref, gunicorn, waitress, werkzeug), by hand (``InvoseqMiddleware``),
or as the WSGI half of the Flask and Django integrations, which name it once they matched a route.

More in docs/architecture.md, "tracer/_patching/integrations/wsgi.py".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from opentelemetry.propagators.textmap import Getter

from tracer._core import context
from tracer._core import service as _service
from tracer._patching.integrations import Hook, PatchSpec, _http_served, _served
from tracer._patching.integrations._http import sending_get as _sending_get
from tracer._patching.integrations._http import sending_reset as _sending_reset
from tracer._patching.integrations._http import sending_set as _sending_set
from tracer._patching.integrations._server_hooks import wrap_after

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

FRAMEWORK: Final = "wsgi"
#: Marks the patches of this module: an application a server hook wrapped for good (gunicorn's)
#: measures only while one is installed.
PATCH_MARK: Final = "__invoseq_wsgi__"
#: The gunicorn workers that call their ``wsgi`` as a WSGI application, by module.
GUNICORN_WSGI_WORKERS: Final = frozenset(
    {"gunicorn.workers.sync", "gunicorn.workers.gthread", "gunicorn.workers.base_async"}
)

_set = context.set_current
_reset = context.reset_current

F = TypeVar("F", bound=Callable[..., Any])


class EnvironHeaders(Getter["WSGIEnvironment"]):
    """A WSGI environ as a carrier: header ``trace-state`` is ``HTTP_TRACE_STATE``; the fields
    of a repeated header arrive joined by ``,`` in one value, as one field of a list does."""

    def get(self, carrier: WSGIEnvironment, key: str) -> list[str] | None:
        name = _ENVIRON_NAMES.get(key)
        if name is None:
            name = key.upper().replace("-", "_")
            name = name if name in _UNPREFIXED else "HTTP_" + name
            if len(_ENVIRON_NAMES) < MAX_ENVIRON_NAMES:
                _ENVIRON_NAMES[key] = name
        value = carrier.get(name)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: WSGIEnvironment) -> list[str]:
        found = [k[5:].lower().replace("_", "-") for k in carrier if k.startswith("HTTP_")]
        return found + [k.lower().replace("_", "-") for k in _UNPREFIXED if carrier.get(k)]


#: The two headers a WSGI environ holds without the ``HTTP_`` prefix (PEP 3333).
_UNPREFIXED: Final = ("CONTENT_TYPE", "CONTENT_LENGTH")
#: A header's environ key by its name (``"traceparent"``: ``"HTTP_TRACEPARENT"``), for the few
#: names asked of every request; at most this many remembered.
MAX_ENVIRON_NAMES: Final = 256
_ENVIRON_NAMES: dict[str, str] = {}


def request_url(environ: WSGIEnvironment) -> str:
    """The request's full URL, as PEP 3333's URL reconstruction gives it."""
    scheme = str(environ.get("wsgi.url_scheme") or "http")
    host = environ.get("HTTP_HOST")
    if not host:
        host = str(environ.get("SERVER_NAME") or "")
        port = str(environ.get("SERVER_PORT") or "")
        if port and port != ("443" if scheme == "https" else "80"):
            host += ":" + port
    path = str(environ.get("SCRIPT_NAME") or "") + str(environ.get("PATH_INFO") or "")
    return _http_served.full_url(scheme, str(host), path, str(environ.get("QUERY_STRING") or ""))


ENVIRON: Final = EnvironHeaders()


def status_code(status: object) -> int | None:
    """The code of a WSGI status line (``"404 Not Found"``), or None."""
    if not isinstance(status, str):
        return None
    code = status[:3]
    return int(code) if code.isdigit() else None


def serve(
    framework: str,
    app: WSGIApplication,
    environ: WSGIEnvironment,
    start_response: StartResponse,
) -> Iterable[bytes]:
    """Run ``app`` for one request, measured as ``framework``'s (module docstring); just run it
    when an outer layer measures the request already or the tracer is not recording."""
    served = _served.begin(
        environ,
        framework,
        str(environ.get("REQUEST_METHOD") or "GET"),
        str(environ.get("SCRIPT_NAME") or "") + str(environ.get("PATH_INFO") or ""),
        ENVIRON,
        url=lambda: request_url(environ),
        traceparent="HTTP_TRACEPARENT" in environ,  # PEP 3333's name of any case's header
    )
    if served is None:
        return app(environ, start_response)

    def start(
        status: str,
        headers: list[tuple[str, str]],
        exc_info: tuple[type[BaseException], BaseException, TracebackType]
        | tuple[None, None, None]
        | None = None,
    ) -> Callable[[bytes], object]:
        served.status = status_code(status)
        served.request.response_headers(headers)
        if exc_info is None:
            return start_response(status, headers)
        return start_response(status, headers, exc_info)

    result: Iterable[bytes] = _served.call_attached(served, _respond, app, environ, start, served)
    return result


def _respond(
    app: WSGIApplication, environ: WSGIEnvironment, start: StartResponse, served: _served.Served
) -> Iterable[bytes]:
    return _response(app(environ, start), served, environ)


def _response(result: Iterable[bytes], served: _served.Served, environ: Any) -> Iterable[bytes]:
    """What the server gets: the application's file wrapper, its ``close`` ending the request,
    else a ``Body`` (made inside the request's context: ``iter(result)`` may run its code)."""
    file_wrapper = environ.get("wsgi.file_wrapper")
    if isinstance(file_wrapper, type) and isinstance(result, file_wrapper):
        close = getattr(result, "close", None)

        def close_file() -> None:
            if close is not None:
                _served.call_attached(served, close)
            served.finish()

        try:
            result.close = close_file  # type: ignore[attr-defined]
            return result
        except (AttributeError, TypeError):  # slots: iterate it ourselves
            pass
    return Body(result, served)


class Body:
    """The response iterable of a measured request (module docstring): each chunk produced under
    the request's context; the request ends at ``close``, or at the end of a body without one."""

    __slots__ = ("_close", "_failed", "_iterator", "_result", "_served")

    def __init__(self, result: Iterable[bytes], served: _served.Served) -> None:
        self._result = result
        self._served = served
        self._close: Callable[[], object] | None = getattr(result, "close", None)
        self._iterator = iter(result)
        self._failed: BaseException | None = None  # raised while producing: the request's end

    def __iter__(self) -> Body:
        return self

    def __next__(self) -> bytes:
        token = _set(self._served.value)
        serving = None if _sending_get() is None else _sending_set(None)
        try:
            return next(self._iterator)
        except StopIteration:
            if self._close is None:
                self._served.finish()
            raise
        except BaseException as exc:
            self._failed = exc
            if self._close is None:
                self._served.finish(exc)
            raise
        finally:
            if serving is not None:
                _sending_reset(serving)
            _reset(token)

    def __bool__(self) -> bool:
        return True  # not by ``__len__``: most bodies have no length

    def __len__(self) -> int:
        """The application's count of chunks, where it has one (wsgiref sets Content-Length by
        it); a TypeError otherwise, as for any unsized iterable."""
        return len(self._result)  # type: ignore[arg-type]

    def close(self) -> None:
        served = self._served
        close = self._close
        if close is not None:
            _served.call_attached(served, close)
        served.finish(self._failed)


def measuring(
    framework: str,
) -> Callable[[Callable[..., Iterable[bytes]]], Callable[..., Iterable[bytes]]]:
    """A patch's maker: a WSGI application method (``Flask.wsgi_app``, Django's
    ``WSGIHandler.__call__``) measuring ``framework``'s requests, unless an outer layer does."""

    def make(original: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        def measured(
            self: Any, environ: WSGIEnvironment, start_response: StartResponse
        ) -> Iterable[bytes]:
            if _served.KEY in environ:
                return original(self, environ, start_response)
            return serve(framework, functools.partial(original, self), environ, start_response)

        return functools.update_wrapper(measured, original)

    return make


class InvoseqMiddleware:
    """A WSGI application measured: ``app.wsgi_app = InvoseqMiddleware(app.wsgi_app)``, or
    around any WSGI application (module docstring). ``framework`` names the module of the
    request's name (``"wsgi.GET"``)."""

    def __init__(self, app: WSGIApplication, framework: str = FRAMEWORK) -> None:
        self.app = app
        self.framework = framework

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        return serve(self.framework, self.app, environ, start_response)


class _Loaded(InvoseqMiddleware):
    """An application a server hook wrapped for as long as the server runs: it measures only
    while ``owner.name`` is a patch of this module (after ``uninstrument`` it passes through)."""

    def __init__(self, app: WSGIApplication, owner: Any, name: str) -> None:
        super().__init__(app)
        self.owner = owner
        self.name = name

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if not getattr(getattr(self.owner, self.name, None), PATCH_MARK, False):
            return self.app(environ, start_response)
        return serve(self.framework, self.app, environ, start_response)


def _marked(replacement: F, original: Any) -> F:
    """``replacement`` named as ``original`` and marked as this module's patch."""
    functools.update_wrapper(replacement, original)
    setattr(replacement, PATCH_MARK, True)
    return replacement


def _wsgiref(module: ModuleType) -> list[PatchSpec]:
    handler = module.BaseHandler
    if not callable(getattr(handler, "run", None)):
        raise TypeError("wsgiref.handlers.BaseHandler has no run()")

    def make(original: Callable[[Any, WSGIApplication], None]) -> Callable[..., None]:
        def run(self: Any, application: WSGIApplication) -> None:
            original(self, functools.partial(serve, FRAMEWORK, application))

        return _marked(run, original)

    return [(handler, "run", make)]


def _gunicorn(module: ModuleType) -> list[PatchSpec]:
    worker = module.Worker
    if not callable(getattr(worker, "load_wsgi", None)):
        raise TypeError("gunicorn.workers.base.Worker has no load_wsgi()")

    def make(original: Callable[[Any], None]) -> Callable[[Any], None]:
        def load_wsgi(self: Any) -> None:
            # loading imports the application: its calls at import time are start-up's
            _service.run("gunicorn.startup", lambda: original(self))
            kinds = {cls.__module__ for cls in type(self).__mro__}
            app = getattr(self, "wsgi", None)
            if kinds & GUNICORN_WSGI_WORKERS and callable(app) and not isinstance(app, _Loaded):
                self.wsgi = _Loaded(app, worker, "load_wsgi")

        return _marked(load_wsgi, original)

    return [(worker, "load_wsgi", make)]


def _measuring(owner: type) -> Callable[[Any], Any | None]:
    """What ``wrap_after`` puts in place of the application a server stored at its
    ``__init__``: the application, measured, once."""

    def wrap(app: Any) -> Any | None:
        return (
            _Loaded(app, owner, "__init__")
            if callable(app) and not isinstance(app, _Loaded)
            else None
        )

    return wrap


def _waitress(module: ModuleType) -> list[PatchSpec]:
    server = module.BaseWSGIServer
    return [wrap_after(server, "__init__", "application", _measuring(server), PATCH_MARK)]


def _werkzeug(module: ModuleType) -> list[PatchSpec]:
    server = module.BaseWSGIServer
    return [wrap_after(server, "__init__", "app", _measuring(server), PATCH_MARK)]


HOOKS: dict[str, Hook] = {
    "wsgiref.handlers": _wsgiref,
    "gunicorn.workers.base": _gunicorn,
    "waitress.server": _waitress,
    "werkzeug.serving": _werkzeug,
}

"""Integration: Flask. Each request is one invocation named by its rule
(``"flask.GET /price/<item>"``), the view a traced child, an unhandled exception an error. The class
``flask.Flask`` is patched, not an application, so one made before ``instrument()`` is measured too.

More in docs/architecture.md, "tracer/_patching/integrations/flask.py".
"""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from tracer._core import context
from tracer._patching.integrations import Hook, PatchSpec, _served, wsgi

if TYPE_CHECKING:
    pass

FRAMEWORK: Final = "flask"
PATCHED: Final = (
    "wsgi_app",
    "__call__",
    "full_dispatch_request",
    "ensure_sync",
    "handle_exception",
)

#: The view of the endpoint being dispatched (what ``ensure_sync`` is about to get).
_view: contextvars.ContextVar[Any] = contextvars.ContextVar("invoseq_flask_view", default=None)
_view_set, _view_reset = context.guarded(_view)


_measure = wsgi.measuring(FRAMEWORK)


def _hook(module: ModuleType) -> list[PatchSpec]:
    flask = module.Flask
    request = module.request  # the proxy of the request being served
    # The request context's own variable (Flask 2.2+): read directly, the request costs an
    # attribute, not the proxy's lookup (about 1.5 µs) each time it is asked for.
    request_context = getattr(sys.modules.get("flask.globals"), "_cv_request", None)

    def served_request() -> Any:
        if isinstance(request_context, contextvars.ContextVar):
            context = request_context.get(None)
            found = getattr(context, "request", None)
            if found is not None:
                return found
        return request

    for name in PATCHED:
        if not callable(getattr(flask, name, None)):
            raise TypeError(f"flask.Flask has no {name}()")

    def full_dispatch_request(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def naming(self: Any) -> Any:
            current = served_request()
            served = _served.served_in(current.environ)
            if served is None:
                return original(self)
            rule = current.url_rule
            served.name(FRAMEWORK, getattr(rule, "rule", None))
            endpoint = getattr(rule, "endpoint", None)
            token = _view_set(None if endpoint is None else self.view_functions.get(endpoint))
            try:
                return original(self)
            finally:
                _view_reset(token)

        return functools.update_wrapper(naming, original)

    def ensure_sync(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def tracing(self: Any, func: Any) -> Any:
            call = original(self, func)
            view = _view.get()
            if view is None or func is not view:
                return call
            _view_set(None)  # the view, once: not the error handler that may be the same
            return _served.trace_call(view, call)

        return functools.update_wrapper(tracing, original)

    def handle_exception(original: Callable[[Any, Exception], Any]) -> Callable[..., Any]:
        def keeping(self: Any, e: Exception) -> Any:
            served = _served.served_in(served_request().environ)
            if served is not None:
                served.exception = e
            return original(self, e)

        return functools.update_wrapper(keeping, original)

    return [
        (flask, "wsgi_app", _measure),
        (flask, "__call__", _measure),
        (flask, "full_dispatch_request", full_dispatch_request),
        (flask, "ensure_sync", ensure_sync),
        (flask, "handle_exception", handle_exception),
    ]


HOOKS: dict[str, Hook] = {"flask.app": _hook}

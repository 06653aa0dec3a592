"""What the server integrations of WSGI, Flask and Django share: the request in service, and the
view functions they trace.

More in docs/architecture.md, "tracer/_patching/integrations/_served.py".
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, MutableMapping
from types import TracebackType
from typing import Any, Final

from opentelemetry.propagators.textmap import Getter

from tracer._core import context, decorator, handoff, recorder
from tracer._patching.integrations import _http_served
from tracer._patching.integrations._http import sending_get as _sending_get
from tracer._patching.integrations._http import sending_reset as _sending_reset
from tracer._patching.integrations._http import sending_set as _sending_set

_set = context.set_current
_reset = context.reset_current

#: The environ's (or scope's) key of the ``Served`` request.
KEY: Final = "invoseq.served"
#: Views remembered at most (wrappers and method ids); past it the cache starts again.
MAX_VIEWS: Final = 1024


class Served:
    """One request in service (module docstring): its ``ServerRequest``, the status sent, and the
    exception the framework turned into a response (counted when that response is a 5xx)."""

    __slots__ = ("request", "status", "unfinished", "value")

    def __init__(self, request: _http_served.ServerRequest) -> None:
        self.request = request
        self.status: int | None = None
        self.unfinished = [True]  # popped by the one finish that counts (atomic, any thread)
        #: The context value the request's code runs under (its invocation's).
        self.value: context.Current = request.call.value

    @property
    def exception(self) -> BaseException | None:
        return self.request.exception

    @exception.setter
    def exception(self, exc: BaseException | None) -> None:
        """Kept on the request: a server's middleware that finishes it names the error too."""
        self.request.exception = exc

    def name(self, framework: str, route: str | None) -> None:
        """Open the invocation as ``framework``'s ``"GET /route"`` (``"GET"`` for no route)."""
        try:
            if not self.request.call.opened:  # the first name wins, and its framework
                self.request.framework = framework
                self.request.name(route)
        except Exception as exc:
            recorder.internal_error(exc)

    def finish(self, exc: BaseException | None = None) -> None:
        """End the invocation (once, whichever thread finishes first): an exception, or a 5xx
        status, marks it an error."""
        try:
            self.unfinished.pop()
        except IndexError:
            return
        if exc is None and self.status is not None and self.status >= 500:
            exc = self.exception
        try:
            self.request.finish(self.status, exc)
        except Exception as inner:
            recorder.internal_error(inner)


class attached:  # noqa: N801 - used as the function it was: ``with attached(served):``
    """The request's context attached for the block, which is outside any client call; an
    exception leaving the block ends the request as an error (and goes on). A class, not a
    ``contextlib.contextmanager``: every request enters it, and a generator costs more."""

    __slots__ = ("_served", "_serving", "_token")

    def __init__(self, served: Served) -> None:
        self._served = served

    def __enter__(self) -> None:
        self._token = _set(self._served.value)
        self._serving = _http_served.serving()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if exc is not None:
                self._served.finish(exc)
        finally:
            _http_served.done_serving(self._serving)
            _reset(self._token)


def call_attached(served: Served, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` as ``attached`` runs a block, without a context manager's object and its
    two calls: a WSGI request comes here twice (the application, and its body's ``close``)."""
    token = _set(served.value)
    serving = None if _sending_get() is None else _sending_set(None)
    try:
        return call(*args)
    except BaseException as exc:
        served.finish(exc)
        raise
    finally:
        if serving is not None:
            _sending_reset(serving)
        _reset(token)


def begin(
    holder: MutableMapping[str, Any],
    framework: str,
    verb: str,
    path: str,
    getter: Getter[Any],
    *,
    url: Callable[[], str] | None = None,
    traceparent: bool = True,
) -> Served | None:
    """Begin the request ``holder`` (an environ, a scope) stands for and store it there; None when
    an outer layer measures it already, the tracer is not recording, or ``url()`` is excluded.
    ``traceparent`` False: the holder has no ``traceparent`` header (the caller looked)."""
    if KEY in holder:
        return None
    request = _http_served.begin_server(
        framework, verb, path, holder, getter, url=url, traceparent=traceparent
    )
    if request is None:
        return None
    served = holder[KEY] = Served(request)
    return served


def served_in(holder: Any) -> Served | None:
    """The request an environ or a scope carries, if a layer measures it."""
    served = holder.get(KEY) if isinstance(holder, dict) else None
    return served if isinstance(served, Served) else None


_methods: dict[Any, int] = {}
_wrappers: dict[Any, Callable[..., Any]] = {}
_lock = threading.Lock()


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    with _lock:
        if len(cache) >= MAX_VIEWS:
            cache.clear()
        cache[key] = value


def view_method(view: Any) -> int:
    """The interned method naming ``view``: its class for a class-based view, else itself."""
    found = _methods.get(view)
    if found is None:
        view_class = getattr(view, "view_class", None)
        found = handoff.method_for(view_class if isinstance(view_class, type) else view)
        _remember(_methods, view, found)
    return found


def trace_call(view: Any, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` (what the framework runs for ``view``, a sync callable) as a traced child named
    after ``view``; ``call`` itself when ``view`` is traced already (or on a failure here)."""
    try:
        if decorator.is_traced(view):
            return call
        if call is view:
            cached = _wrappers.get(view)
            if cached is not None:
                return cached
        wrapper = decorator.wrap_with_method(call, view_method(view))
        if call is view:
            _remember(_wrappers, view, wrapper)
        return wrapper
    except Exception as exc:  # an unhashable callable, a C callable we cannot wrap
        recorder.internal_error(exc)
        return call


def trace_view(view: Any, is_async: Callable[[Any], bool]) -> Callable[..., Any]:
    """``view`` as a traced child of the same kind (``is_async`` as the framework decides it:
    a function only marked as a coroutine function gets a coroutine wrapper) that carries the
    view's attributes (``csrf_exempt``, ``view_class``, ...); ``view`` itself when traced."""
    try:
        if decorator.is_traced(view):
            return view  # type: ignore[no-any-return]
        cached = _wrappers.get(view)
        if cached is not None:
            return cached
        target = view
        if is_async(view) and not inspect.iscoroutinefunction(view):
            target = _awaiting(view)
        wrapper = decorator.wrapper_for(target, view_method(view))
        functools.update_wrapper(wrapper, view)
        _remember(_wrappers, view, wrapper)
        return wrapper
    except Exception as exc:
        recorder.internal_error(exc)
        return view  # type: ignore[no-any-return]


def _awaiting(view: Callable[..., Any]) -> Callable[..., Any]:
    """A coroutine function awaiting ``view``, a function only marked as one (what returns a
    coroutine without being ``async def``: a class-based view's ``as_view``)."""

    async def awaiting(*args: Any, **kwargs: Any) -> Any:
        return await view(*args, **kwargs)

    return awaiting

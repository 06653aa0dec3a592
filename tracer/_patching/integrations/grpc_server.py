"""Integration: gRPC servers, ``grpc`` and ``grpc.aio``. Each RPC a server handles is one
invocation, ``grpc.server /shop.Pricing/Quote``, with the handler a traced child named after the
program's function (``shop.Pricing.Quote``), as a web request has its view::

    grpc.server /shop.Pricing/Quote      rpc.service=shop.Pricing  rpc.grpc.status_code=0
    └── shop.Pricing.Quote

More in docs/architecture.md, "tracer/_patching/integrations/grpc_server.py".
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any, Final

from tracer._core import context, recorder
from tracer._patching.integrations import Hook, PatchSpec, _endpoints, _grpc, installed, mark

INTERCEPTORS: Final = "interceptors"
#: The attribute of an ``RpcMethodHandler`` holding the behavior, by (request, response) streaming.
KINDS: Final = {
    (False, False): "unary_unary",
    (False, True): "unary_stream",
    (True, False): "stream_unary",
    (True, True): "stream_stream",
}
#: What a sync server reads off a behavior: carried over to ours.
_BEHAVIOR_OPTIONS: Final = ("experimental_thread_pool",)

_set = context.set_current
_reset = context.reset_current

Behavior = Callable[..., Any]


def measure(handler: Any, details: Any) -> Any:
    """``handler`` (an ``RpcMethodHandler``) with its behavior measured as the call of
    ``details`` (``HandlerCallDetails``); ``handler`` itself when it cannot be (never raises)."""
    try:
        kind = KINDS[bool(handler.request_streaming), bool(handler.response_streaming)]
        behavior = getattr(handler, kind, None)
        replace = getattr(handler, "_replace", None)  # grpc's handlers are named tuples
        if (
            behavior is None
            or not callable(replace)
            or getattr(behavior, "experimental_non_blocking", False)
        ):
            return handler
        method = _grpc.text(details.method)
        wrapped = _behavior(
            behavior, method, details.invocation_metadata, bool(handler.response_streaming)
        )
        for option in _BEHAVIOR_OPTIONS:
            if hasattr(behavior, option):
                setattr(wrapped, option, getattr(behavior, option))
        return replace(**{kind: wrapped})
    except Exception as exc:
        recorder.internal_error(exc)
        return handler


def _behavior(behavior: Behavior, method: str, metadata: Any, streaming: bool) -> Behavior:
    """The measured behavior, of the shape gRPC tells apart (an aio server runs a coroutine or an
    async generator on its loop, anything else in its thread pool)."""
    handler = _endpoints.endpoint(behavior)  # the traced child, named after the program's function
    if inspect.isasyncgenfunction(behavior):
        return _async_generator(handler, method, metadata)
    if inspect.iscoroutinefunction(behavior):
        return _coroutine(handler, method, metadata)
    return _sync(handler, method, metadata, streaming)


def _sync(handler: Behavior, method: str, metadata: Any, streaming: bool) -> Behavior:
    def behavior(request: Any, servicer: Any, *more: Any) -> Any:
        call = _grpc.begin_server(method, metadata)
        if call is None:
            return handler(request, servicer, *more)
        token = _set(call.value)
        try:
            result = handler(request, servicer, *more)
        except BaseException as exc:
            finish(call, servicer, exc)
            raise
        finally:
            _reset(token)
        if streaming:  # measured until the responses end
            return Steps(result, call, servicer)
        finish(call, servicer, None)
        return result

    return behavior


def _coroutine(handler: Behavior, method: str, metadata: Any) -> Behavior:
    async def behavior(request: Any, servicer: Any) -> Any:
        call = _grpc.begin_server(method, metadata)
        if call is None:
            return await handler(request, servicer)
        token = _set(call.value)
        try:
            result = await handler(request, servicer)
        except BaseException as exc:
            finish(call, servicer, exc)
            raise
        finally:
            _reset(token)
        finish(call, servicer, None)
        return result

    return behavior


def _async_generator(handler: Behavior, method: str, metadata: Any) -> Behavior:
    async def behavior(request: Any, servicer: Any) -> AsyncIterator[Any]:
        call = _grpc.begin_server(method, metadata)
        responses = handler(request, servicer)
        while True:
            token = None if call is None else _set(call.value)
            try:
                item = await responses.__anext__()
            except StopAsyncIteration:
                if call is not None:
                    finish(call, servicer, None)
                return
            except BaseException as exc:
                if call is not None:
                    finish(call, servicer, exc)
                raise
            finally:
                if token is not None:
                    _reset(token)
            try:
                yield item
            except BaseException as exc:  # closed early (the client went away), or thrown into
                token = None if call is None else _set(call.value)
                try:
                    await responses.aclose()
                finally:
                    if token is not None:
                        _reset(token)
                    if call is not None:
                        finish(call, servicer, exc)
                raise

    return behavior


class Steps:
    """A streamed response (``responses``, what a sync handler returned) one step at a time, each
    with ``call`` attached; ``call`` finished when the responses run out or raise, or when the
    server closes or drops them before (the client went away: CANCELLED)."""

    __slots__ = ("call", "iterator", "responses", "servicer")

    def __init__(self, responses: Any, call: _grpc.Call, servicer: Any) -> None:
        self.responses = responses
        self.iterator: Iterator[Any] | None = None
        self.call = call
        self.servicer = servicer

    def __iter__(self) -> Steps:
        return self

    def __next__(self) -> Any:
        if self.call.done:
            raise StopIteration
        token = _set(self.call.value)
        try:
            if self.iterator is None:
                self.iterator = iter(self.responses)
            return next(self.iterator)
        except StopIteration:
            finish(self.call, self.servicer, None)
            raise
        except BaseException as exc:
            finish(self.call, self.servicer, exc)
            raise
        finally:
            _reset(token)

    def close(self) -> None:
        """Close the responses (a generator's ``close``) and end the call as cancelled."""
        if self.call.done:
            return
        close = getattr(
            self.iterator if self.iterator is not None else self.responses, "close", None
        )
        token = _set(self.call.value)
        try:
            if callable(close):
                close()
        finally:
            _reset(token)
            finish(self.call, self.servicer, GeneratorExit())

    def __del__(self) -> None:
        try:
            self.close()
        except Exception as exc:
            recorder.internal_error(exc)


def finish(call: _grpc.Call, servicer: Any, exc: BaseException | None) -> None:
    """End ``call`` with the status the handler left in ``servicer`` (its ``ServicerContext``)."""
    try:
        code = _grpc.number(_code(servicer))
        if exc is None:
            status = _grpc.OK if code is None else code
            if code is None and _inactive(servicer):
                status = _grpc.CANCELLED  # the client went away while the handler ran
            call.finish(status, _grpc.status_error(status))
        elif code is not None and code != _grpc.OK:  # abort(), or set_code() then raise
            call.finish(code, _grpc.status_error(code))
        elif isinstance(exc, GeneratorExit | asyncio.CancelledError):
            call.finish(_grpc.CANCELLED, _grpc.status_error(_grpc.CANCELLED))
        else:
            call.finish(_grpc.UNKNOWN, type(exc).__name__)
    except Exception as error:
        recorder.internal_error(error)
        call.finish(None, None if exc is None else type(exc).__name__)


def _code(servicer: Any) -> Any:
    """The status code the handler set (None: none), where the context tells it (the sync
    context of a sync handler on an aio server does not)."""
    code = getattr(servicer, "code", None)
    return code() if callable(code) else None


def _inactive(servicer: Any) -> bool:
    is_active = getattr(servicer, "is_active", None)
    return callable(is_active) and is_active() is False


def sync_interceptor(base: type, owner: ModuleType) -> Any:
    """Our interceptor for servers of ``grpc`` (``base``: ``grpc.ServerInterceptor``); it passes
    calls through once ``owner.server`` is no longer our patch."""

    class InvoseqServerInterceptor(base):  # type: ignore[misc]
        def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
            handler = continuation(details)
            if handler is None or not installed(owner, "server"):
                return handler
            return measure(handler, details)

    return InvoseqServerInterceptor()


def aio_interceptor(base: type, owner: ModuleType) -> Any:
    """``sync_interceptor`` for servers of ``grpc.aio`` (``base``: its ``ServerInterceptor``)."""

    class InvoseqServerInterceptor(base):  # type: ignore[misc]
        async def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
            handler = await continuation(details)
            if handler is None or not installed(owner, "server"):
                return handler
            return measure(handler, details)

    return InvoseqServerInterceptor()


def patch_server(interceptor: Callable[[], Any]) -> Callable[[Behavior], Behavior]:
    """``make_replacement`` of ``grpc.server`` and ``grpc.aio.server``: ``interceptor()`` made
    once, put first in every server's interceptors."""

    def make(original: Behavior) -> Behavior:
        signature = inspect.signature(original)
        ours = interceptor()

        @functools.wraps(original)
        def server(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
                given = bound.arguments.get(INTERCEPTORS)
                bound.arguments[INTERCEPTORS] = [ours, *(() if given is None else given)]
            except Exception:  # arguments the original refuses: let it say so
                return original(*args, **kwargs)
            with context.detached():  # grpc.aio's poller thread, for every call of the process
                return original(*bound.args, **bound.kwargs)

        return mark(server)

    return make


def _detached(original: Behavior) -> Behavior:
    @functools.wraps(original)
    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        with context.detached():
            return original(self, *args, **kwargs)

    return start


def _detached_async(original: Behavior) -> Behavior:
    @functools.wraps(original)
    async def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _set(None)
        try:
            return await original(self, *args, **kwargs)
        finally:
            _reset(token)

    return start


def _start_patch(
    module_name: str, class_name: str, make: Callable[[Behavior], Behavior]
) -> list[PatchSpec]:
    """The patch detaching a server class's ``start`` (none if this grpc version has no such
    method: servers are measured all the same)."""
    try:
        owner = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return []
    if not isinstance(owner, type) or not callable(vars(owner).get("start")):
        return []
    return [(owner, "start", make)]


def _require_interceptors(server: Any) -> None:
    if INTERCEPTORS not in inspect.signature(server).parameters:
        raise TypeError(f"{server!r} takes no {INTERCEPTORS}")


def _grpc_hook(module: ModuleType) -> list[PatchSpec]:
    _require_interceptors(module.server)
    base = module.ServerInterceptor
    return [
        (module, "server", patch_server(lambda: sync_interceptor(base, module))),
        *_start_patch("grpc._server", "_Server", _detached),
    ]


def _aio_hook(module: ModuleType) -> list[PatchSpec]:
    _require_interceptors(module.server)
    base = module.ServerInterceptor
    return [
        (module, "server", patch_server(lambda: aio_interceptor(base, module))),
        *_start_patch("grpc.aio._server", "Server", _detached_async),
    ]


HOOKS: dict[str, Hook] = {"grpc": _grpc_hook, "grpc.aio": _aio_hook}

"""Integration: gRPC clients, ``grpc`` and ``grpc.aio``. Each call a channel makes is one
invocation, ``grpc.client /shop.Pricing/Quote``, under the traced call that made it, handing off to
the server in the call's metadata (``_grpc``), so the server's RPC continues the sequence.

More in docs/architecture.md, "tracer/_patching/integrations/grpc_client.py".
"""

from __future__ import annotations

import collections
import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tracer._core import context, measured, recorder
from tracer._patching.integrations import Hook, PatchSpec, _grpc, _grpc_reads, installed, mark

TARGET: Final = "target"
INTERCEPTORS: Final = "interceptors"
CONSTRUCTORS: Final = ("insecure_channel", "secure_channel")
#: The fields of a sync call's ``ClientCallDetails``.
DETAILS: Final = ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")

_set = context.set_current
_reset = context.reset_current

Function = Callable[..., Any]


class Channel:
    """What the interceptors of one channel know: the constructor (of ``owner``) that made it
    and the attributes of its target."""

    __slots__ = ("attributes", "name", "owner")

    def __init__(self, owner: ModuleType, name: str, target: str) -> None:
        self.owner = owner
        self.name = name
        self.attributes: dict[str, measured.AttributeValue] = _grpc.target_attributes(target)

    def begin(self, details: Any) -> _grpc.Call | None:
        """The call ``details`` describe, begun; None once uninstrumented (never raises)."""
        try:
            if not installed(self.owner, self.name):
                return None
            return _grpc.begin_client(_grpc.text(details.method), self.attributes)
        except Exception as exc:
            recorder.internal_error(exc)
            return None


def with_metadata(
    details: Any, call: _grpc.Call, metadata_of: Callable[[_grpc.Pairs], Any], make: Function
) -> Any:
    """``details`` with the call's hand-off in a copy of their metadata (``metadata_of`` turns the
    pairs into what the channel takes; ``make(details, metadata)`` builds details that are no
    named tuple); ``details`` themselves if that fails."""
    try:
        metadata = metadata_of(call.inject(details.metadata))
        replace = getattr(details, "_replace", None)
        return replace(metadata=metadata) if callable(replace) else make(details, metadata)
    except Exception as exc:
        recorder.internal_error(exc)
        return details


def outcome(done: Any, rpc_error: type[BaseException]) -> tuple[int | None, str | None]:
    """(status, Error name) of a finished sync call: a ``grpc.Future`` that is a ``grpc.Call``."""
    if done.cancelled():
        return _grpc.CANCELLED, _grpc.status_error(_grpc.CANCELLED)
    exc = done.exception()
    status = _grpc.number(done.code())
    if exc is not None and not isinstance(exc, rpc_error):
        return status, type(exc).__name__
    return status, _grpc.status_error(status)


def aio_outcome(done: Any) -> tuple[int | None, str | None]:
    """(status, Error name) of a finished ``grpc.aio`` call. Its ``code()`` is a coroutine whose
    answer is ready once the call is done: run to its end here (never left suspended)."""
    if done.cancelled():
        return _grpc.CANCELLED, _grpc.status_error(_grpc.CANCELLED)
    code = done.code()
    try:
        code.send(None)
    except StopIteration as stop:
        status = _grpc.number(stop.value)
        return status, _grpc.status_error(status)
    code.close()  # not ready after all: no status
    return None, None


def _when_done(
    call: _grpc.Call, status_of: Callable[[Any], tuple[int | None, str | None]]
) -> Function:
    """The done callback that ends ``call`` with the status ``status_of`` reads off the call."""

    def done(rpc: Any) -> None:
        try:
            call.finish(*status_of(rpc))
        except Exception as exc:
            recorder.internal_error(exc)
            call.finish(None, None)

    return done


def _watch(
    call: _grpc.Call, rpc: Any, status_of: Callable[[Any], tuple[int | None, str | None]]
) -> None:
    try:
        rpc.add_done_callback(_when_done(call, status_of))
    except Exception as exc:
        recorder.internal_error(exc)
        call.finish(None, None)


class SyncInterceptor:
    """The four interceptor kinds of ``grpc`` in one object, for one channel (``Channel``); the
    hook subclasses it with grpc's interceptor classes (``sync_interceptor_class``).

    A call (any kind) is begun, its hand-off written into its metadata, and made with no sequence
    attached: the threads gRPC starts for it (the channel's polling thread, which serves every call
    in flight, the thread that sends a streamed request) belong to no call. A streamed request is
    stepped with the call attached instead (``_grpc.Requests``). Its done callback ends the call."""

    rpc_error: type[BaseException] = Exception  # grpc.RpcError
    details_class: Function = dict  # a named tuple of DETAILS, a grpc.ClientCallDetails

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def _make(self, details: Any, metadata: Any) -> Any:
        found = {name: getattr(details, name, None) for name in DETAILS}
        return self.details_class(**{**found, "metadata": metadata})

    def _intercept(
        self, continuation: Function, details: Any, request: Any, *, streaming: bool
    ) -> Any:
        call = self.channel.begin(details)
        if call is None:
            return continuation(details, request)
        details = with_metadata(details, call, tuple, self._make)
        if streaming:
            request = _grpc.requests_of(request, call)
        try:
            with context.detached():
                made = continuation(details, request)
        except BaseException as exc:
            call.finish(None, type(exc).__name__)
            raise
        status_of = functools.partial(outcome, rpc_error=self.rpc_error)
        _watch(call, made, status_of)
        _grpc_reads.ending_on_read(made, call, status_of)
        return made

    def intercept_unary_unary(self, continuation: Function, details: Any, request: Any) -> Any:
        return self._intercept(continuation, details, request, streaming=False)

    def intercept_unary_stream(self, continuation: Function, details: Any, request: Any) -> Any:
        return self._intercept(continuation, details, request, streaming=False)

    def intercept_stream_unary(self, continuation: Function, details: Any, requests: Any) -> Any:
        return self._intercept(continuation, details, requests, streaming=True)

    def intercept_stream_stream(self, continuation: Function, details: Any, requests: Any) -> Any:
        return self._intercept(continuation, details, requests, streaming=True)


def sync_interceptor_class(module: ModuleType) -> type[SyncInterceptor]:
    """``SyncInterceptor`` as the four interceptor classes of ``grpc`` (``intercept_channel``
    takes nothing else)."""
    fields = collections.namedtuple("ClientCallDetails", DETAILS)  # type: ignore[misc]
    bases = (
        SyncInterceptor,
        module.UnaryUnaryClientInterceptor,
        module.UnaryStreamClientInterceptor,
        module.StreamUnaryClientInterceptor,
        module.StreamStreamClientInterceptor,
    )
    attributes = {
        "rpc_error": module.RpcError,
        "details_class": type("ClientCallDetails", (fields, module.ClientCallDetails), {}),
    }
    made: type[SyncInterceptor] = type("InvoseqClientInterceptor", bases, attributes)
    return made


class AioInterceptor:
    """One interceptor of a ``grpc.aio`` channel; the hook subclasses it with each of the four
    interceptor classes of ``grpc.aio`` (``aio_interceptor_classes``), since a channel files an
    interceptor under the first kind it is. The interceptors run in a task of the call."""

    module: Any = None  # grpc.aio

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def _metadata(self, pairs: _grpc.Pairs) -> Any:
        return self.module.Metadata.from_tuple(tuple(pairs))

    def _make(self, details: Any, metadata: Any) -> Any:
        return self.module.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def _intercept(
        self, continuation: Function, details: Any, request: Any, *, streaming: bool
    ) -> Any:
        call = self.channel.begin(details)
        if call is None:
            return await continuation(details, request)
        details = with_metadata(details, call, self._metadata, self._make)
        if streaming:
            request = _grpc.requests_of(request, call)
        token = _set(None)  # the tasks gRPC starts for the call belong to no call
        try:
            rpc = await continuation(details, request)
        except BaseException as exc:
            call.finish(None, type(exc).__name__)
            raise
        finally:
            _reset(token)
        _watch(call, rpc, aio_outcome)
        return rpc

    async def intercept_unary_unary(
        self, continuation: Function, details: Any, request: Any
    ) -> Any:
        return await self._intercept(continuation, details, request, streaming=False)

    async def intercept_unary_stream(
        self, continuation: Function, details: Any, request: Any
    ) -> Any:
        return await self._intercept(continuation, details, request, streaming=False)

    async def intercept_stream_unary(
        self, continuation: Function, details: Any, requests: Any
    ) -> Any:
        return await self._intercept(continuation, details, requests, streaming=True)

    async def intercept_stream_stream(
        self, continuation: Function, details: Any, requests: Any
    ) -> Any:
        return await self._intercept(continuation, details, requests, streaming=True)


def aio_interceptor_classes(module: ModuleType) -> list[type[AioInterceptor]]:
    """``AioInterceptor`` as each interceptor class of ``grpc.aio``."""
    kinds = ("UnaryUnary", "UnaryStream", "StreamUnary", "StreamStream")
    return [
        type(
            f"Invoseq{kind}ClientInterceptor",
            (AioInterceptor, getattr(module, f"{kind}ClientInterceptor")),
            {"module": module},
        )
        for kind in kinds
    ]


def patch_sync_channel(module: ModuleType, name: str) -> Callable[[Function], Function]:
    """``make_replacement`` of ``grpc.insecure_channel``/``secure_channel``."""

    interceptor = sync_interceptor_class(module)

    def make(original: Function) -> Function:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def channel(*args: Any, **kwargs: Any) -> Any:
            with context.detached():  # the threads it starts serve every call of the channel
                made = original(*args, **kwargs)
            try:
                target = str(signature.bind(*args, **kwargs).arguments[TARGET])
                ours = interceptor(Channel(module, name, target))
                return module.intercept_channel(made, ours)
            except Exception as exc:
                recorder.internal_error(exc)
                return made

        return mark(channel)

    return make


def patch_aio_channel(module: ModuleType, name: str) -> Callable[[Function], Function]:
    """``make_replacement`` of ``grpc.aio.insecure_channel``/``secure_channel``."""

    classes = aio_interceptor_classes(module)

    def make(original: Function) -> Function:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def channel(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
                made = Channel(module, name, str(bound.arguments[TARGET]))
                ours = [interceptor(made) for interceptor in classes]
                given = bound.arguments.get(INTERCEPTORS)
                bound.arguments[INTERCEPTORS] = [*(() if given is None else given), *ours]
            except Exception:  # arguments the original refuses: let it say so
                return original(*args, **kwargs)
            with context.detached():  # gRPC's poller thread, for every call of the process
                return original(*bound.args, **bound.kwargs)

        return mark(channel)

    return make


def _require(module: ModuleType, parameters: tuple[str, ...]) -> None:
    for name in CONSTRUCTORS:
        found = inspect.signature(getattr(module, name)).parameters
        missing = [p for p in parameters if p not in found]
        if missing:
            raise TypeError(f"{module.__name__}.{name} takes no {', '.join(missing)}")


def _grpc_hook(module: ModuleType) -> list[PatchSpec]:
    _require(module, (TARGET,))
    if not callable(getattr(module, "intercept_channel", None)):
        raise TypeError("grpc has no intercept_channel")
    return [(module, name, patch_sync_channel(module, name)) for name in CONSTRUCTORS]


def _aio_hook(module: ModuleType) -> list[PatchSpec]:
    _require(module, (TARGET, INTERCEPTORS))
    return [(module, name, patch_aio_channel(module, name)) for name in CONSTRUCTORS]


HOOKS: dict[str, Hook] = {"grpc": _grpc_hook, "grpc.aio": _aio_hook}

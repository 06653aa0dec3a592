"""What the gRPC integrations share (``grpc_server``, ``grpc_client``): metadata as the carrier of
``traceparent``/``tracestate``, status codes, and one measured call from begin to finish.

More in docs/architecture.md, "tracer/_patching/integrations/_grpc.py".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry.propagators.textmap import Getter, Setter

from tracer import propagation
from tracer._core import context, measured, recorder

MODULE: Final = "grpc"
SYSTEM: Final = "rpc.system"
SERVICE: Final = "rpc.service"
METHOD: Final = "rpc.method"
STATUS: Final = "rpc.grpc.status_code"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"

#: gRPC's status codes by number (fixed by the protocol).
STATUS_NAMES: Final = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
OK: Final = 0
CANCELLED: Final = 1
UNKNOWN: Final = 2
#: OpenTelemetry's context key that turns instrumentation off (``opentelemetry.context``).
_SUPPRESSED: Final[str | None] = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", None)

_set = context.set_current
_reset = context.reset_current

Pair = tuple[str, Any]


class Pairs(list[Pair]):
    """Metadata pairs that read like a mapping's ``items()`` too, so ``propagation.inject`` finds
    a ``tracestate`` the caller put there and sends its entries on."""

    def items(self) -> list[Pair]:
        return list(self)


class MetadataCarrier(Getter[Any], Setter[Any]):
    """gRPC metadata: any iterable of ``(key, value)`` pairs to read (the server's invocation
    metadata, a client's ``Metadata``), a ``Pairs`` list to write (a key replaced in place of
    every pair of that key). Keys match in any case; only text values count."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        found = [value for name, value in pairs(carrier) if name == key and isinstance(value, str)]
        return found or None

    def keys(self, carrier: Any) -> list[str]:
        return [name for name, _ in pairs(carrier)]

    def set(self, carrier: Any, key: str, value: str) -> None:
        carrier[:] = [(name, old) for name, old in carrier if str(name).lower() != key]
        carrier.append((key, value))


METADATA: Final = MetadataCarrier()


def pairs(metadata: Any) -> Iterator[Pair]:
    """The ``(key, value)`` pairs of ``metadata`` (None: none), keys in lower case; an item that
    is not a pair is skipped."""
    for item in metadata or ():
        try:
            name, value = item
        except (TypeError, ValueError):
            continue
        if isinstance(name, str):
            yield name.lower(), value


def text(value: Any) -> str:
    """A method name as gRPC gives it (``str``, or ``bytes`` in ``grpc.aio``'s call details)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def number(code: Any) -> int | None:
    """The number of a status code: ``grpc.StatusCode`` (whose value is ``(5, "not found")``),
    the core's integer codes (``grpc.aio``), or None for none."""
    if code is None:
        return None
    value = getattr(code, "value", code)
    if isinstance(value, tuple) and value:
        value = value[0]
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def status_error(status: int | None) -> str | None:
    """The Error event's name for a status: None for OK (or none), else ``"gRPC NOT_FOUND"``."""
    if status is None or status == OK:
        return None
    name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else str(status)
    return f"gRPC {name}"


def target_attributes(target: str) -> dict[str, measured.AttributeValue]:
    """``server.address`` (and ``server.port``) of a channel's target: ``"host:port"``,
    ``"dns:///host:port"``, ``"ipv4:127.0.0.1:50051"``, ``"[::1]:50051"``; another form (a
    ``unix:`` socket) is the address as it is."""
    address = target
    if address.startswith(("dns:", "ipv4:", "ipv6:")):
        address = address.partition(":")[2].rpartition("/")[2]
    host, colon, port = address.rpartition(":")
    if colon and host and port.isdigit() and (":" not in host or host.startswith("[")):
        return {SERVER_ADDRESS: host.strip("[]"), SERVER_PORT: int(port)}
    return {SERVER_ADDRESS: address}


class Call:
    """One measured RPC (module docstring), opened at once, finished once: ``finish`` may come
    from another thread than ``begin`` (a client's done callback, and the program's thread reading
    the call's end at the same moment) and only the first is kept."""

    __slots__ = ("attributes", "call", "hop", "method_id", "unfinished")

    def __init__(self, call: measured.Measured, side: str, method: str) -> None:
        self.call = call
        self.hop = method  # the hand-off's name: one per method, a bounded set
        self.method_id = measured.method(MODULE, f"{side} {method}")
        service, _, name = method.lstrip("/").rpartition("/")
        self.attributes: dict[str, measured.AttributeValue] = {
            SYSTEM: "grpc",
            SERVICE: service,
            METHOD: name,
        }
        self.unfinished = [True]  # popped by the one finish that counts (atomic, any thread)
        call.open(self.method_id)

    @property
    def done(self) -> bool:
        """Whether the call was finished."""
        return not self.unfinished

    @property
    def value(self) -> context.Current:
        """The context value the code inside the call runs with."""
        return self.call.value

    def inject(self, metadata: Iterable[Any] | None) -> Pairs:
        """The caller's metadata pairs, with a fresh hand-off from this call unless they carry a
        ``traceparent``; the caller's object is never changed."""
        found = Pairs(metadata or ())
        try:
            if METADATA.get(found, propagation.TRACEPARENT):
                return found
            token = _set(self.call.value)
            try:
                propagation.inject(found, setter=METADATA, name=self.hop)
            finally:
                _reset(token)
        except Exception as exc:
            recorder.internal_error(exc)
        return found

    def finish(self, status: int | None, error: str | None) -> None:
        """End the call with its status (None: none known) and its Error's name (None: ok)."""
        try:
            self.unfinished.pop()
        except IndexError:
            return
        try:
            if status is not None:
                self.attributes[STATUS] = status
            if error is not None:
                self.attributes[ERROR_TYPE] = error
            self.call.finish(self.method_id, self.attributes, error=error)
        except Exception as exc:
            recorder.internal_error(exc)


def begin_server(method: str, metadata: Any) -> Call | None:
    """Begin a call a server handles, continuing the sequence ``metadata`` carries or starting
    one; None when not recording (never raises)."""
    try:
        remote = propagation.extract(metadata, getter=METADATA)
        token = _set(None)  # not under whatever the server's thread or task carries
        try:
            started = measured.begin(remote)
        finally:
            _reset(token)
        return None if started is None else Call(started, "server", method)
    except Exception as exc:
        recorder.internal_error(exc)
        return None


def begin_client(method: str, attributes: dict[str, measured.AttributeValue]) -> Call | None:
    """Begin a call a client makes, under the current invocation (or as a root); None when not
    recording or while OpenTelemetry suppresses instrumentation (never raises)."""
    try:
        if _SUPPRESSED is not None and otel_context.get_value(_SUPPRESSED):
            return None
        started = measured.begin()
        if started is None:
            return None
        call = Call(started, "client", method)
        call.attributes.update(attributes)
        return call
    except Exception as exc:
        recorder.internal_error(exc)
        return None


class Requests:
    """A client call's streamed request, each step of it run with the call (``value``) attached,
    in whichever thread gRPC consumes it: what the program's request generator calls is the
    call's."""

    __slots__ = ("iterator", "requests", "value")

    def __init__(self, requests: Any, value: context.Current) -> None:
        self.requests = requests
        self.iterator: Iterator[Any] | None = None
        self.value = value

    def __iter__(self) -> Requests:
        return self

    def __next__(self) -> Any:
        token = _set(self.value)
        try:
            if self.iterator is None:
                self.iterator = iter(self.requests)
            return next(self.iterator)
        finally:
            _reset(token)


class AsyncRequests:
    """``Requests`` for a ``grpc.aio`` call's asynchronous request iterator (its task)."""

    __slots__ = ("iterator", "requests", "value")

    def __init__(self, requests: Any, value: context.Current) -> None:
        self.requests = requests
        self.iterator: AsyncIterator[Any] | None = None
        self.value = value

    def __aiter__(self) -> AsyncRequests:
        return self

    async def __anext__(self) -> Any:
        token = _set(self.value)
        try:
            if self.iterator is None:
                self.iterator = aiter(self.requests)
            return await anext(self.iterator)
        finally:
            _reset(token)


def requests_of(requests: Any, call: Call) -> Any:
    """``requests`` (a streamed request, sync or async iterable) stepped with ``call`` attached;
    anything else as it is."""
    try:
        if hasattr(requests, "__aiter__"):
            return AsyncRequests(requests, call.value)
        if hasattr(requests, "__iter__"):
            return Requests(requests, call.value)
    except Exception as exc:
        recorder.internal_error(exc)
    return requests

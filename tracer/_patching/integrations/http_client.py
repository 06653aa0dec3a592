"""http.client (and ``urllib.request``, which sends through it): one invocation per request,
``"GET host/path"``, from ``HTTPConnection.request`` to ``getresponse``.

More in docs/architecture.md, "tracer/_patching/integrations/http_client.py".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tracer._core import recorder
from tracer._patching.integrations import Hook, PatchSpec, _clients, _http_sent
from tracer._patching.integrations._http_sent import ClientRequest

LIBRARY: Final = "http.client"
#: The attribute of a connection holding its request in flight.
PENDING: Final = "_invoseq_client"
#: ``request(method, url, body, headers)``: ``headers`` in the positional arguments after ``url``.
_HEADERS_AT: Final = 1


def _url(connection: Any, target: str, https: type[Any] | None) -> str:
    """The URL requested: the tunnelled host when the connection goes through a proxy."""
    secure = https is not None and isinstance(connection, https)
    host = getattr(connection, "_tunnel_host", None) or connection.host
    port = getattr(connection, "_tunnel_port", None) or connection.port
    return _clients.target_url("https" if secure else "http", host, port, target)


def _take(connection: Any) -> ClientRequest | None:
    """The connection's request in flight, removed from it."""
    try:
        pending: ClientRequest | None = vars(connection).pop(PENDING, None)
        return pending
    except TypeError:  # no __dict__: nothing was kept
        return None


def _keep(connection: Any, client: ClientRequest) -> None:
    try:
        vars(connection)[PENDING] = client
    except TypeError:  # a connection without __dict__: end it now rather than never
        _clients.finish(client)


def _with_headers(
    client: ClientRequest, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments with ``headers`` replaced by a copy carrying the hand-off (unchanged when
    that fails)."""
    try:
        at = len(args) > _HEADERS_AT
        headers = _clients.copy_headers(args[_HEADERS_AT] if at else kwargs.get("headers"))
        _clients.inject(client, headers)
        if at:
            return (*args[:_HEADERS_AT], headers, *args[_HEADERS_AT + 1 :]), kwargs
        return args, {**kwargs, "headers": headers}
    except Exception as exc:
        recorder.internal_error(exc)
        return args, kwargs


def patch_request(original: Callable[..., Any], https: type[Any] | None) -> Callable[..., Any]:
    @functools.wraps(original)
    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        pending = _take(self)
        if pending is not None:  # the previous response was never read
            _clients.finish(pending)
        client = _clients.begin(LIBRARY, lambda: (method, _url(self, url, https)), attach=False)
        if client is None:
            return original(self, method, url, *args, **kwargs)
        args, kwargs = _with_headers(client, args, kwargs)
        try:
            result = original(self, method, url, *args, **kwargs)
        except BaseException as exc:
            _clients.finish(client, exc=exc)
            raise
        _keep(self, client)
        return result

    return request


def patch_getresponse(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def getresponse(self: Any) -> Any:
        client = _take(self)
        if client is None:
            return original(self)
        return _clients.call(client, lambda: original(self))

    return getresponse


def patch_close(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def close(self: Any) -> Any:
        client = _take(self)
        if client is not None:
            _clients.finish(client)
        return original(self)

    return close


def patch_putheader(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def putheader(self: Any, header: Any, *values: Any) -> Any:
        return original(self, header, *_http_sent.attempt_header(header, values))

    return putheader


def _hook(module: ModuleType) -> list[PatchSpec]:
    connection = module.HTTPConnection
    _clients.require(connection, "request", ("self", "method", "url", "body", "headers"))
    _clients.require(connection, "getresponse", ("self",))
    _clients.require(connection, "close", ("self",))
    _clients.require(connection, "putheader", ("self", "header", "values"))
    https = getattr(module, "HTTPSConnection", None)  # absent without the ssl module
    return [
        (connection, "request", lambda original: patch_request(original, https)),
        (connection, "getresponse", patch_getresponse),
        (connection, "close", patch_close),
        (connection, "putheader", patch_putheader),
    ]


HOOKS: dict[str, Hook] = {"http.client": _hook}

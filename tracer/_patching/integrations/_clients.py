"""What the client integrations share beyond ``_http`` and ``_http_sent``: the URL a request is
named after, copies of the caller's headers, a fresh hand-off for a request object sent again, and
running the library's call between ``begin`` and ``finish``.

More in docs/architecture.md, "tracer/_patching/integrations/_clients.py".
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from opentelemetry import context as otel_context

from tracer import propagation
from tracer._core import recorder
from tracer._patching.integrations import _http, _http_sent, _options
from tracer._patching.integrations._http_sent import ClientRequest

T = TypeVar("T")

#: The attribute of a request object holding the traceparent we wrote into it.
SENT_MARK: Final = "_invoseq_traceparent"
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
#: OpenTelemetry's context key that turns instrumentation off (``opentelemetry.context``).
_SUPPRESSED: Final[str | None] = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", None)


def public_url(url: str) -> str:
    """``url`` without credentials or fragment; one without a scheme is taken as ``http``."""
    if "://" not in url:
        url = "http://" + url.lstrip("/")
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=netloc, fragment="").geturl()


def target_url(scheme: str, host: str, port: int | None, target: str) -> str:
    """The URL of a request for ``target`` (a path, or an absolute URL sent to a proxy) on
    ``host:port``; the scheme's default port is left out, an IPv6 address bracketed."""
    if "://" in target:
        return target
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    authority = host if port is None or port == DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    return f"{scheme}://{authority}{target if target.startswith('/') else '/' + target}"


def begin(
    library: str, describe: Callable[[], tuple[str, str]], *, attach: bool = True
) -> ClientRequest | None:
    """``_http_sent.begin_client`` for the ``(verb, url)`` that ``describe`` returns; None inside
    another client's call, when not recording, while OpenTelemetry suppresses instrumentation, or
    when the request cannot be described (counted; never raises)."""
    try:
        if _SUPPRESSED is not None and otel_context.get_value(_SUPPRESSED):
            return None
        verb, url = describe()
        url = public_url(str(url))
        verb = str(verb)
    except Exception as exc:
        recorder.internal_error(exc)
        return None
    return _http_sent.begin_client(library, verb, url, attach=attach)


def copy_headers(headers: Mapping[str, Any] | None) -> MutableMapping[str, Any]:
    """A copy of the caller's headers of the same kind where it can copy itself (a dict,
    urllib3's ``HTTPHeaderDict``), else a dict; an empty dict for None."""
    if headers is None:
        return {}
    copy = getattr(headers, "copy", None)
    copied = copy() if callable(copy) else None
    return copied if isinstance(copied, MutableMapping) else dict(headers)


def inject(client: ClientRequest, headers: Any, owner: Any = None) -> None:
    """Write the hand-off of ``client`` into ``headers`` unless the caller put a traceparent
    there. ``owner``: the request object whose headers these are, which the caller may send
    again; a traceparent written on its earlier send is replaced by a fresh one."""
    try:
        sent = None if owner is None else getattr(owner, SENT_MARK, None)
        found = propagation.HEADERS.get(headers, propagation.TRACEPARENT)
        if sent is not None and found == [sent]:
            for name in propagation.HEADERS.keys(headers):
                if name.lower() == propagation.TRACEPARENT:
                    del headers[name]
            found = None
        client.inject(headers)
        capture = _options.current().client_request
        if capture:
            client.attributes.update(capture.attributes(_http.header_items(headers)))
        if owner is not None and not found:
            written = propagation.HEADERS.get(headers, propagation.TRACEPARENT)
            if written:
                setattr(owner, SENT_MARK, written[0])
    except Exception as exc:
        recorder.internal_error(exc)


def inject_request(client: ClientRequest, request: Any) -> None:
    """``inject`` into the headers of ``request``, the object the library sends (and the caller
    may send again)."""
    try:
        headers = request.headers
    except Exception as exc:
        recorder.internal_error(exc)
        return
    inject(client, headers, owner=request)


def finish(client: ClientRequest, response: Any = None, exc: BaseException | None = None) -> None:
    """End ``client`` with the status of ``response`` (None: no response) or with ``exc``."""
    try:
        capture = _options.current().client_response
        headers = getattr(response, "headers", None)
        if capture and headers is not None:
            client.attributes.update(capture.attributes(_http.header_items(headers)))
        client.finish(None if response is None else _http.status_of(response), exc)
    except Exception as error:
        recorder.internal_error(error)


def call(client: ClientRequest, send: Callable[[], T]) -> T:
    """Run ``send()`` (the library's own call) as the request ``client`` measures."""
    try:
        response = send()
    except BaseException as exc:
        finish(client, exc=exc)
        raise
    finish(client, response)
    return response


async def call_async(client: ClientRequest, send: Callable[[], Awaitable[T]]) -> T:
    """``call`` for a coroutine: the request ends when it returns or raises."""
    try:
        response = await send()
    except BaseException as exc:
        finish(client, exc=exc)
        raise
    finish(client, response)
    return response


def require(owner: Any, name: str, parameters: tuple[str, ...]) -> Any:
    """``owner.name``, checked to be a function whose first parameters are ``parameters``: a
    library version whose signature differs is not patched (the hook raises, so the integration
    is skipped and logged once)."""
    function = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else None
    if not callable(function):
        raise TypeError(f"{owner.__qualname__}.{name} is not a function here")
    found = parameters_of(function)[: len(parameters)]
    if found != parameters:
        raise RuntimeError(f"{owner.__qualname__}.{name} takes {found}, expected {parameters}")
    return function


def parameters_of(function: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``function``'s parameters, in order."""
    return tuple(inspect.signature(function).parameters)

"""What every HTTP integration shares: a request served, a request sent.

More in docs/architecture.md, "tracer/_patching/integrations/_http.py".
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Callable, Iterable
from typing import Any, Final
from urllib.parse import urlsplit

from opentelemetry.propagators.textmap import Getter, Setter

from invoseq.events import MAX_ATTRIBUTE_VALUE
from tracer import propagation
from tracer._core import context, measured, recorder
from tracer._patching.integrations import _options

METHOD: Final = "http.request.method"
ROUTE: Final = "http.route"
STATUS: Final = "http.response.status_code"
PATH: Final = "url.path"
URL: Final = "url.full"
SERVER: Final = "server.address"
ERROR_TYPE: Final = "error.type"

#: The client call in progress in this context (None outside one, and inside a served request).
_sending: contextvars.ContextVar[ClientRequest | None] = contextvars.ContextVar(
    "invoseq_sending", default=None
)
#: Its methods, for the request paths that test it inline (``sending_get() is not None``): bound
#: once here, one module global of each request's own module (asgi, wsgi, _served).
sending_get: Final = _sending.get
#: Set and reset as every ContextVar of the tracer's is (``context.guarded``).
sending_set, sending_reset = context.guarded(_sending)
#: True inside a request an excluded URL leaves untraced (what the framework runs for it, an
#: endpoint FastAPI would trace, stays untraced too).
excluding: contextvars.ContextVar[bool] = contextvars.ContextVar("invoseq_excluding", default=False)
excluding_set, excluding_reset = context.guarded(excluding)
_set = context.set_current
_reset = context.reset_current


#: The distinct path-template names a process gives requests with no route, at most.
MAX_TEMPLATES: Final = 200
#: The segments of a path a template keeps (the rest is ``/...``), and the characters of one.
MAX_SEGMENTS: Final = 8
MAX_SEGMENT_CHARS: Final = 40
_UUID: Final = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)
_HEX: Final = re.compile(r"(?=[^/]*[0-9])[0-9a-fA-F]{8,}")
_templates: set[str] = set()
#: The methods of requests no route names, by (framework, verb, path): at most this many.
MAX_UNROUTED: Final = 4096
_unrouted_methods: dict[tuple[str, str, str], int] = {}
#: The methods of routed requests by (framework, verb, route): ``measured.method``'s, without
#: building the name each request; at most ``MAX_UNROUTED`` too.
_routed_methods: dict[tuple[str, str, str], int] = {}


def _remember(
    methods: dict[tuple[str, str, str], int], key: tuple[str, str, str], found: int
) -> int:
    """``found``, kept in ``methods`` under ``key`` (past ``MAX_UNROUTED`` it starts again)."""
    if len(methods) >= MAX_UNROUTED:
        methods.clear()
    methods[key] = found
    return found


def _fold(segment: str) -> str:
    if segment.isdigit():
        return "{int}"
    if _UUID.fullmatch(segment):
        return "{uuid}"
    if _HEX.fullmatch(segment):
        return "{hex}"
    return segment if len(segment) <= MAX_SEGMENT_CHARS else "{long}"


def path_template(path: str) -> str:
    """``path`` with what looks like an id folded: a number ``{int}``, a UUID ``{uuid}``, a hex
    id of 8 or more digits ``{hex}``, a segment over ``MAX_SEGMENT_CHARS`` ``{long}``; at most
    ``MAX_SEGMENTS`` segments kept (``/...`` after them)."""
    segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
    folded = [_fold(segment) for segment in segments[:MAX_SEGMENTS]]
    if len(segments) > MAX_SEGMENTS:
        folded.append("...")
    return "/" + "/".join(folded)


def unrouted_name(verb: str, path: str) -> str:
    """The name of a request no route names: the verb and ``path_template``, or the verb alone
    once ``MAX_TEMPLATES`` names exist (every later new one too)."""
    name = f"{verb} {path_template(path)}"
    if name in _templates:
        return name
    if len(_templates) >= MAX_TEMPLATES:
        return verb
    _templates.add(name)
    return name


def error_name(status: int | None, exc: BaseException | None) -> str | None:
    """The Error event's name: the exception's type, else ``HTTP 503`` for a 5xx status."""
    if exc is not None:
        return type(exc).__name__
    if status is not None and status >= 500:
        return f"HTTP {status}"
    return None


class ServerRequest:
    """One request a server handles (module docstring). The integration attaches ``value`` (the
    context the handler runs under) around the code that serves the request."""

    __slots__ = ("attributes", "call", "captured", "exception", "framework", "verb")

    def __init__(self, framework: str, verb: str, call: measured.Measured, path: str) -> None:
        self.framework = framework
        self.verb = verb
        self.call = call
        #: Within the wire's limits as they are written (``measured.clip`` is skipped at the end)
        #: unless ``captured``: headers an allow-list added.
        self.attributes: dict[str, measured.AttributeValue] = {
            METHOD: verb[:MAX_ATTRIBUTE_VALUE],
            PATH: path[:MAX_ATTRIBUTE_VALUE],
        }
        self.captured = False
        #: The exception a framework turned into a response: the error of a 5xx with no other.
        self.exception: BaseException | None = None

    @property
    def value(self) -> context.Current:
        return self.call.value

    def refine(self, framework: str) -> None:
        """The request becomes ``framework``'s (the module its name is in), unless it is named
        already: a framework inside the server that began it."""
        if not self.call.opened:
            self.framework = framework

    def name(self, route: str | None) -> None:
        """Open the invocation named by the matched route (first call wins)."""
        if self.call.opened:
            return
        if route:
            self.attributes[ROUTE] = route[:MAX_ATTRIBUTE_VALUE]
            key = (self.framework, self.verb, route)
            found = _routed_methods.get(key)
            if found is None:
                found = _remember(
                    _routed_methods, key, measured.method(self.framework, f"{self.verb} {route}")
                )
            self.call.open(found)
        else:
            self.call.open(self._unrouted())

    def _unrouted(self) -> int:
        """The method of a request no route names (``unrouted_name``), remembered by its
        framework, verb and path (at most ``MAX_UNROUTED``, then the memory starts again)."""
        path = self.attributes.get(PATH)
        key = (self.framework, self.verb, path if isinstance(path, str) else "")
        found = _unrouted_methods.get(key)
        if found is None:
            name = unrouted_name(self.verb, key[2]) if isinstance(path, str) else self.verb
            found = _remember(_unrouted_methods, key, measured.method(self.framework, name))
        return found

    def capture(self, headers: Iterable[tuple[str, str]]) -> None:
        """Record the request's headers the allow-list names (``_options``); never raises."""
        try:
            self.attributes.update(_options.current().server_request.attributes(headers))
            self.captured = True
        except Exception as exc:
            recorder.internal_error(exc)

    def response_headers(self, headers: Iterable[tuple[str, str]]) -> None:
        """Record the response's headers the allow-list names (``_options``); never raises."""
        try:
            options = _options.current()
            if options.capturing_response:
                capture = options.server_response
                self.attributes.update(capture.attributes(headers))
                self.captured = True
        except Exception as exc:
            recorder.internal_error(exc)

    def finish(self, status: int | None, exc: BaseException | None = None) -> None:
        if status is not None:
            self.attributes[STATUS] = status
        if exc is None and (status is None or status < 500):
            error = None  # error_name(), inline for the common case: no error
        else:
            error = error_name(status, self.exception if exc is None else exc)
        if error is not None:
            self.attributes[ERROR_TYPE] = error[:MAX_ATTRIBUTE_VALUE]
        call = self.call
        fallback = 0 if call.opened else self._unrouted()
        call.finish(fallback, self.attributes, error=error, clipped=not self.captured)


def begin_server(
    framework: str,
    verb: str,
    path: str,
    carrier: Any,
    getter: Getter[Any] | None = None,
    *,
    url: Callable[[], str] | None = None,
    traceparent: bool = True,
) -> ServerRequest | None:
    """Begin a served request from its headers; None when not recording, or when ``url()``, the
    request's full URL, is excluded (``_options``; never raises). ``traceparent`` False: the
    caller found no ``traceparent`` header in the carrier (nothing to extract)."""
    try:
        options = _options.current()
        if url is not None:
            patterns = options.excluded  # _options.excluded() asked only when there is a list
            if patterns.get(framework, patterns["*"]) is not None and _options.excluded(
                framework, url
            ):
                return None
        remote = propagation.extract(carrier, getter=getter) if traceparent else None
        request = begin_request(framework, verb.upper(), path, remote)
        if request is not None and options.capturing_request:
            request.capture(header_items(carrier, getter))
        return request
    except Exception as exc:
        recorder.internal_error(exc)
        return None


def begin_request(
    framework: str, verb: str, path: str, remote: context.Current | None
) -> ServerRequest | None:
    """Begin a served request under ``remote`` (what its headers carry: ``propagation.extract``),
    ``verb`` in capitals; None when not recording (never raises). The request's headers are the
    caller's to ``capture`` when ``_options.current().capturing_request``."""
    try:
        call = measured.begin(remote)
        return None if call is None else ServerRequest(framework, verb, call, path)
    except Exception as exc:
        recorder.internal_error(exc)
        return None


def header_items(carrier: Any, getter: Getter[Any] | None = None) -> list[tuple[str, str]]:
    """Every ``(name, value)`` of a carrier's headers, through its getter."""
    if getter is None:  # a mapping: its items, every field of a name
        return [(k, v) for k, v in carrier.items() if isinstance(k, str) and isinstance(v, str)]
    names = dict.fromkeys(name.lower() for name in getter.keys(carrier))
    return [(name, value) for name in names for value in getter.get(carrier, name) or ()]


def full_url(scheme: str, host: str, path: str, query: str) -> str:
    """``scheme://host/path?query`` (the URL excluded URLs are searched in)."""
    return f"{scheme}://{host}{path}" + (f"?{query}" if query else "")


def serving() -> object | None:
    """Mark the code of a served request as outside any client call (an in-process test client
    calling the app must not hide the app's own outgoing requests); undo with ``done_serving``.
    Outside any client call (a real server's requests) there is nothing to mark: None."""
    return sending_set(None) if _sending.get() is not None else None


def done_serving(token: object | None) -> None:
    if token is not None:
        sending_reset(token)


class ClientRequest:
    """One request a client sends: ``inject`` writes the hand-off, ``finish`` ends it."""

    __slots__ = (
        "attributes",
        "call",
        "hop",
        "library",
        "name",
        "on_wire",
        "sending",
        "token",
        "written",
    )

    def __init__(
        self,
        library: str,
        name: str,
        hop: str,
        call: measured.Measured,
        url: str,
        *,
        attach: bool = True,
    ) -> None:
        self.library = library
        self.name = name
        self.hop = hop  # the hand-off's name: one per verb and host, so a bounded set
        self.call = call
        self.attributes: dict[str, measured.AttributeValue] = {URL: url}
        self.token = _set(call.value) if attach else None
        self.sending = sending_set(self) if attach else None
        self.written: str | None = None  # the traceparent of the latest hand-off written
        self.on_wire = False  # whether an attempt has sent ``written`` already

    def inject(self, carrier: Any, setter: Setter[Any] | None = None) -> None:
        """Write a fresh hand-off from this call into ``carrier`` unless it has a traceparent."""
        try:
            if propagation.HEADERS.get(carrier, propagation.TRACEPARENT):
                return
            self._hand_off(carrier, setter)
            written = propagation.HEADERS.get(carrier, propagation.TRACEPARENT)
            self.written = written[0] if written else None
        except Exception as exc:
            recorder.internal_error(exc)

    def _hand_off(self, carrier: Any, setter: Setter[Any] | None) -> None:
        """A hand-off from this call, attached or not: from its own value, not from what the
        stack says is current (a traced coroutine resumed around an attached call is)."""
        propagation.inject_from(carrier, self.call.value, name=self.hop, setter=setter)

    def next_traceparent(self, sent: str) -> str:
        """The traceparent an attempt about to send ``sent`` puts on the wire: ``sent`` itself
        unless it is this call's hand-off and an earlier attempt sent it already (a redirect or a
        retry), then a fresh hand-off's, recorded now, as the hop leaves."""
        if sent != self.written:
            return sent  # the caller's own, or none of ours
        if not self.on_wire:
            self.on_wire = True
            return sent
        fresh: dict[str, str] = {}
        self._hand_off(fresh, None)
        value = fresh.get(propagation.TRACEPARENT)
        if value is None:  # no longer recording: send it as it was
            return sent
        self.written = value
        return value

    def finish(self, status: int | None, exc: BaseException | None = None) -> None:
        """End the call (in the context that began it, when attached: it detaches the call's
        context)."""
        try:
            if self.sending is not None:
                sending_reset(self.sending)
            if self.token is not None:
                _reset(self.token)
        except (ValueError, RuntimeError):  # finished in another context: leave them be
            pass
        if status is not None:
            self.attributes[STATUS] = status
        error = error_name(status, exc)
        if error is not None:
            self.attributes[ERROR_TYPE] = error
        self.call.finish(self.call_method(), self.attributes, error=error)

    def call_method(self) -> int:
        return measured.method(self.library, self.name)


def attempt(headers: Any) -> None:
    """One attempt of the client call in progress is about to send ``headers`` (a mutable
    mapping): a redirect or retry gets a fresh hand-off in place of the one an earlier attempt
    sent (``ClientRequest.next_traceparent``). Nothing outside a client call; never raises."""
    client = _sending.get()
    if client is None or client.written is None:
        return
    try:
        found = propagation.HEADERS.get(headers, propagation.TRACEPARENT)
        if not found or len(found) != 1:
            return
        value = client.next_traceparent(found[0])
        if value != found[0]:
            propagation.HEADERS.set(headers, propagation.TRACEPARENT, value)
    except Exception as exc:
        recorder.internal_error(exc)


def attempt_header(name: Any, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``attempt`` for a library that writes one header at a time (http.client's ``putheader``):
    the values to send for header ``name``. Nothing outside a client call; never raises."""
    client = _sending.get()
    if client is None or client.written is None or len(values) != 1:
        return values
    try:
        key = name.decode("latin-1") if isinstance(name, bytes) else name
        if not isinstance(key, str) or key.lower() != propagation.TRACEPARENT:
            return values
        value = values[0]
        sent = value.decode("latin-1") if isinstance(value, bytes) else value
        if not isinstance(sent, str):
            return values
        fresh = client.next_traceparent(sent)
        return values if fresh == sent else (fresh,)
    except Exception as exc:
        recorder.internal_error(exc)
        return values


def begin_client(library: str, verb: str, url: str, *, attach: bool = True) -> ClientRequest | None:
    """Begin a request sent to ``url``, opened at once and attached as the current invocation;
    None inside another client's call or when not recording (never raises). ``attach=False``
    leaves the caller's context attached (a library whose request and response are separate
    calls, http.client): ``finish`` may then run in any context, and the code in between is not
    inside the client's call."""
    if _sending.get() is not None:
        return None
    try:
        call = measured.begin()
        if call is None:
            return None
        parts = urlsplit(url)
        verb = verb.upper()
        name = f"{verb} {parts.netloc}{parts.path or '/'}"
        request = ClientRequest(library, name, f"{verb} {parts.netloc}", call, url, attach=attach)
        call.open(request.call_method())
        return request
    except Exception as exc:
        recorder.internal_error(exc)
        return None


def send(library: str, verb: str, url: str, carrier: Any, do: Callable[[], Any]) -> Any:
    """Send a request the simple way: begin, inject into ``carrier``, run ``do()`` and finish
    with the ``status_code``/``status`` of what it returns, or with the exception it raises."""
    request = begin_client(library, verb, url)
    if request is None:
        return do()
    request.inject(carrier)
    try:
        response = do()
    except BaseException as exc:
        request.finish(None, exc)
        raise
    request.finish(status_of(response))
    return response


def status_of(response: Any) -> int | None:
    status = getattr(response, "status_code", None)
    if status is None:
        status = getattr(response, "status", None)
    return status if isinstance(status, int) else None

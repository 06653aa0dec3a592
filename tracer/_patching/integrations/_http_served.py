"""A request served, as every HTTP server integration measures it: begun from its headers
(``begin_server``, ``begin_request``), named by its route or else by its path with the ids folded
(``path_template``, ``unrouted_name``), finished with its status; its code marked outside any
client call (``serving``).

More in docs/architecture.md, "tracer/_patching/integrations/_http.py".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Final

from opentelemetry.propagators.textmap import Getter

from invoseq.events import MAX_ATTRIBUTE_VALUE
from tracer import propagation
from tracer._core import context, measured, recorder
from tracer._patching.integrations import _options
from tracer._patching.integrations._http import (
    ERROR_TYPE,
    METHOD,
    PATH,
    ROUTE,
    STATUS,
    _sending,
    error_name,
    header_items,
    sending_reset,
    sending_set,
)

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

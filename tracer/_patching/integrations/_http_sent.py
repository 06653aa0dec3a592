"""A request sent, as every HTTP client integration measures it: one invocation, opened at once
(``begin_client``), that writes a fresh hand-off into the outgoing headers (``inject``), a fresh
one again for each later attempt (``attempt``, ``attempt_header``), and finishes with the
response's status.

More in docs/architecture.md, "tracer/_patching/integrations/_http.py".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.propagators.textmap import Setter

from tracer import propagation
from tracer._core import context, measured, recorder
from tracer._patching.integrations._http import (
    ERROR_TYPE,
    STATUS,
    URL,
    _sending,
    error_name,
    sending_reset,
    sending_set,
    status_of,
)

_set = context.set_current
_reset = context.reset_current


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

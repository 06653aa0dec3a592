"""What every HTTP integration shares: the attributes' names, the client call in progress, the
mark of a request an excluded URL leaves untraced, an error's name, a carrier's headers and a
response's status. A request served is ``_http_served``'s, a request sent ``_http_sent``'s.

More in docs/architecture.md, "tracer/_patching/integrations/_http.py".
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.propagators.textmap import Getter

from tracer._core import context

if TYPE_CHECKING:
    from tracer._patching.integrations._http_sent import ClientRequest

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


def error_name(status: int | None, exc: BaseException | None) -> str | None:
    """The Error event's name: the exception's type, else ``HTTP 503`` for a 5xx status."""
    if exc is not None:
        return type(exc).__name__
    if status is not None and status >= 500:
        return f"HTTP {status}"
    return None


def header_items(carrier: Any, getter: Getter[Any] | None = None) -> list[tuple[str, str]]:
    """Every ``(name, value)`` of a carrier's headers, through its getter."""
    if getter is None:  # a mapping: its items, every field of a name
        return [(k, v) for k, v in carrier.items() if isinstance(k, str) and isinstance(v, str)]
    names = dict.fromkeys(name.lower() for name in getter.keys(carrier))
    return [(name, value) for name in names for value in getter.get(carrier, name) or ()]


def status_of(response: Any) -> int | None:
    status = getattr(response, "status_code", None)
    if status is None:
        status = getattr(response, "status", None)
    return status if isinstance(status, int) else None

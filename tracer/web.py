"""Web services by hand: the middleware the integrations install, for a server they do not know.

    from tracer.web import ASGIMiddleware, WSGIMiddleware

    app = WSGIMiddleware(app)   # any WSGI server
    app = ASGIMiddleware(app)   # any ASGI server

More in docs/architecture.md, "tracer/web.py".
"""

from __future__ import annotations

from tracer._patching.integrations import DISABLED_ENV, INTEGRATIONS
from tracer._patching.integrations.asgi import InvoseqMiddleware as ASGIMiddleware
from tracer._patching.integrations.wsgi import InvoseqMiddleware as WSGIMiddleware

__all__ = ["DISABLED_ENV", "INTEGRATIONS", "ASGIMiddleware", "WSGIMiddleware"]

"""Web services by hand: the middleware the integrations install, for a server they do not know.

    from tracer.web import ASGIMiddleware, WSGIMiddleware

    app = WSGIMiddleware(app)   # any WSGI server
    app = ASGIMiddleware(app)   # any ASGI server

Under ``tracer run`` or ``tracer.instrument()`` the integrations put them in place themselves for
Flask, Django, Starlette, FastAPI, aiohttp, gunicorn and wsgiref (docs/guide.md, "Web services
with no code change"); a request is measured once however many of them it passes through.
``INTEGRATIONS`` names every integration, as ``instrument(disable=[...])`` and
``INVOSEQ_DISABLED_INTEGRATIONS`` take them.
"""

from __future__ import annotations

from tracer._patching.integrations import DISABLED_ENV, INTEGRATIONS
from tracer._patching.integrations.asgi import InvoseqMiddleware as ASGIMiddleware
from tracer._patching.integrations.wsgi import InvoseqMiddleware as WSGIMiddleware

__all__ = ["DISABLED_ENV", "INTEGRATIONS", "ASGIMiddleware", "WSGIMiddleware"]

"""The registry of integrations: one record per integration, read by the import watcher
(``tracer._patching.integrations``), ``tracer info`` and the guide's integrations table. The
watcher reads it at ``instrument()``, so nothing here imports more than ``typing`` (versions are
compared without ``packaging``).

More in docs/architecture.md, "Integrations: patched on import".
"""

from __future__ import annotations

from typing import Final, NamedTuple


class Integration(NamedTuple):
    """One integration (module docstring)."""

    #: The name ``disable`` and ``INVOSEQ_DISABLED_INTEGRATIONS`` take; its module's name too.
    name: str
    #: The library as its users name it.
    library: str
    #: The distribution whose installed version is checked (None: the standard library's).
    distribution: str | None
    #: The versions supported, ``">=2.2"`` or ``">=1,<3"`` (empty: any).
    versions: str
    #: The modules whose import makes the integration patch (its ``HOOKS``' keys).
    modules: tuple[str, ...]
    #: What it patches.
    patches: tuple[str, ...]
    #: What it measures, one line.
    description: str
    #: Its names among OpenTelemetry's instrumentations (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``).
    otel_names: tuple[str, ...] = ()
    #: The packages of its library, where ``modules`` names others' too (Starlette's hooks of
    #: anyio): patching those alone does not make it active (empty: the packages of ``modules``).
    packages: tuple[str, ...] = ()

    def own(self, module: str) -> bool:
        """Whether ``module`` is of this integration's library (``packages``)."""
        top = module.partition(".")[0]
        return top in self.packages if self.packages else True


_ANYIO_BACKEND: Final = "anyio._backends._asyncio"

#: Every integration, in the order the hooks of one module apply.
REGISTRY: Final = (
    Integration(
        "wsgi",
        "wsgiref, gunicorn's WSGI workers (sync, gthread, eventlet/gevent), waitress, werkzeug's "
        "server (`run_simple`, `flask run`)",
        None,
        "",
        ("wsgiref.handlers", "gunicorn.workers.base", "waitress.server", "werkzeug.serving"),
        (
            "wsgiref.handlers.BaseHandler.run",
            "gunicorn.workers.base.Worker.load_wsgi",
            "waitress.server.BaseWSGIServer.__init__",
            "werkzeug.serving.BaseWSGIServer.__init__",
        ),
        "each request a WSGI app serves (`wsgi.GET /orders/{int}`), named by the framework "
        "inside it; gunicorn's loading the app, a service sequence",
    ),
    Integration(
        "flask",
        "Flask",
        "flask",
        ">=2.2",
        ("flask.app",),
        tuple(
            f"flask.Flask.{name}"
            for name in (
                "wsgi_app",
                "__call__",
                "full_dispatch_request",
                "ensure_sync",
                "handle_exception",
            )
        ),
        "each request (`flask.GET /price/<item>`), the view function a child",
        ("flask",),
    ),
    Integration(
        "django",
        "Django (WSGI and ASGI handlers)",
        "django",
        ">=4.2",
        (
            "asgiref.sync",
            "django.core.handlers.base",
            "django.core.handlers.exception",
            "django.core.handlers.wsgi",
            "django.core.handlers.asgi",
        ),
        (
            "django.core.handlers.wsgi.WSGIHandler.__call__",
            "django.core.handlers.asgi.ASGIHandler.__call__",
            "django.core.handlers.base.BaseHandler.resolve_request",
            "django.core.handlers.exception.response_for_exception",
            "asgiref.sync.SyncToAsync.thread_handler",
        ),
        "each request (`django.GET /price/<str:item>`), the view a child",
        ("django",),
        ("django",),
    ),
    Integration(
        "asgi",
        "uvicorn (`uvicorn APP`, `uvicorn.run`, gunicorn's `UvicornWorker`), hypercorn, daphne",
        None,
        "",
        (
            "uvicorn.config",
            "hypercorn.app_wrappers",
            "hypercorn.utils",
            "daphne.server",
            "daphne.utils",
        ),
        (
            "uvicorn.config.Config.load",
            "uvicorn.config.Config.load_app",
            "hypercorn.app_wrappers.ASGIWrapper.__init__",
            "hypercorn.utils.load_application",
            "daphne.server.Server.__init__",
            "daphne.utils.import_by_path",
        ),
        "each request an ASGI app serves under one of them (`asgi.GET /orders/{int}`), named by "
        "the framework inside it; its lifespan and the server's loading it, service sequences; "
        "and the ASGI middleware the next two install "
        "(`tracer.web.ASGIMiddleware`)",
        ("asgi",),
    ),
    Integration(
        "starlette",
        "Starlette",
        "starlette",
        ">=0.27",
        ("starlette.applications", "starlette.routing", _ANYIO_BACKEND),
        (
            "starlette.applications.Starlette.build_middleware_stack",
            "starlette.routing.Route.handle",
            "starlette.routing.Mount.handle",
            "anyio WorkerThread.__init__",
        ),
        "each request (`starlette.GET /price/{item}`), the endpoint a child",
        ("starlette",),
        ("starlette",),
    ),
    Integration(
        "fastapi",
        "FastAPI",
        "fastapi",
        ">=0.100",
        ("fastapi.applications", "fastapi.routing", _ANYIO_BACKEND),
        (
            "fastapi.FastAPI.build_middleware_stack",
            "fastapi.routing.run_endpoint_function",
            "fastapi.routing._route_selected",
            "anyio WorkerThread.__init__",
        ),
        "each request (`fastapi.GET /price/{item}`), the endpoint a child",
        ("fastapi",),
        ("fastapi",),
    ),
    Integration(
        "aiohttp_server",
        "aiohttp's web server",
        "aiohttp",
        ">=3.8",
        ("aiohttp.web_app", "aiohttp.web_urldispatcher"),
        (
            "aiohttp.web_app.Application._handle",
            "aiohttp.web_urldispatcher.UrlMappingMatchInfo.handler",
        ),
        "each request (`aiohttp.GET /price/{item}`), the handler a child",
        ("aiohttp-server",),
    ),
    Integration(
        "requests",
        "requests",
        "requests",
        ">=2.28",
        ("requests.sessions",),
        ("requests.Session.send",),
        "each request sent (`requests.GET host/path`)",
        ("requests",),
    ),
    Integration(
        "urllib3",
        "urllib3",
        "urllib3",
        ">=1.26",
        ("urllib3.connectionpool", "urllib3.poolmanager"),
        ("urllib3.PoolManager.urlopen", "urllib3.HTTPConnectionPool.urlopen"),
        "each request sent, unless requests sent it",
        ("urllib3",),
    ),
    Integration(
        "httpx",
        "httpx, sync and async",
        "httpx",
        ">=0.24",
        ("httpx",),
        (
            "httpx.Client.send",
            "httpx.AsyncClient.send",
            "httpx.Client._send_single_request",
            "httpx.AsyncClient._send_single_request",
        ),
        "each request sent",
        ("httpx",),
    ),
    Integration(
        "aiohttp_client",
        "aiohttp's `ClientSession`",
        "aiohttp",
        ">=3.8",
        ("aiohttp.client",),
        ("aiohttp.ClientSession._request", "aiohttp.ClientRequest.send"),
        "each request sent",
        ("aiohttp-client",),
    ),
    Integration(
        "http_client",
        "`http.client`, and so `urllib.request`",
        None,
        "",
        ("http.client",),
        tuple(
            f"http.client.HTTPConnection.{n}"
            for n in ("request", "getresponse", "close", "putheader")
        ),
        "each request sent, unless a library above sent it",
        ("urllib",),
    ),
    Integration(
        "rq",
        "RQ (producers and work horses)",
        "rq",
        ">=1.15",
        ("rq.queue", "rq.job", "rq.worker"),
        ("rq.Queue.create_job", "rq.job.Job.perform", "rq.job.Job.func", "rq.Worker.perform_job"),
        "each job enqueued (a hand-off in `job.meta`), each run (`jobs.add`)",
    ),
    Integration(
        "celery",
        "Celery (producers and workers)",
        "celery",
        ">=5.3",
        ("celery.signals",),
        ("receivers connected to six of `celery.signals`",),
        "each task published (a hand-off in the message), each run in the worker (`tasks.charge`)",
        ("celery",),
    ),
    Integration(
        "grpc_server",
        "gRPC servers, `grpc` and `grpc.aio`",
        "grpcio",
        ">=1.60",
        ("grpc", "grpc.aio"),
        ("grpc.server", "grpc.aio.server", "their servers' `start`"),
        "each RPC a server handles (`grpc.server /shop.Pricing/Quote`), the handler a child",
        ("grpc_server", "grpc_aio_server"),
    ),
    Integration(
        "grpc_client",
        "gRPC channels, `grpc` and `grpc.aio`",
        "grpcio",
        ">=1.60",
        ("grpc", "grpc.aio"),
        ("grpc.insecure_channel", "grpc.secure_channel", "and `grpc.aio`'s"),
        "each call a channel makes (`grpc.client /shop.Pricing/Quote`)",
        ("grpc_client", "grpc_aio_client"),
    ),
    Integration(
        "asgiref",
        "asgiref (Django, Flask's async views)",
        "asgiref",
        ">=3.6",
        ("asgiref.sync",),
        ("asgiref.sync._restore_context",),
        "nothing of its own: `sync_to_async`/`async_to_sync` never carry the context a copy was "
        "given back to their caller",
    ),
    Integration(
        "anyio",
        "anyio's asyncio backend",
        "anyio",
        ">=3.7",
        (_ANYIO_BACKEND,),
        ("anyio._backends._asyncio.copy_context",),
        "nothing of its own: the contexts it copies (`to_thread`, `from_thread`) carry the exact "
        "call",
    ),
)

BY_NAME: Final = {integration.name: integration for integration in REGISTRY}
#: OpenTelemetry's instrumentation names -> ours.
BY_OTEL_NAME: Final = {
    otel: integration.name for integration in REGISTRY for otel in integration.otel_names
}


def release(version: str) -> tuple[int, ...]:
    """The release numbers a version starts with (``"2.2.0rc1"`` -> ``(2, 2, 0)``)."""
    numbers = []
    for part in version.strip().split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(numbers)


_COMPARE: Final = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


def supports(versions: str, version: str) -> bool:
    """Whether ``version`` is in ``versions`` (comma-separated ``>=``, ``<``, ``==`` ... clauses,
    compared by release numbers, padded with zeros); an unreadable version is supported."""
    found = release(version)
    if not found:
        return True
    for written in filter(None, (c.strip() for c in versions.split(","))):
        operator = next((op for op in _COMPARE if written.startswith(op)), "")
        clause = written if operator else "==" + written
        operator = operator or "=="
        bound = release(clause[len(operator) :])
        width = max(len(found), len(bound))
        padded = found + (0,) * (width - len(found)), bound + (0,) * (width - len(bound))
        if not _COMPARE[operator](*padded):
            return False
    return True


def render_table() -> str:
    """The guide's integrations table (docs/guide.md, "The integrations"), generated from the
    registry: a test compares the guide with it."""
    lines = [
        "| name | library | versions | measures | patches |",
        "|---|---|---|---|---|",
    ]
    for integration in REGISTRY:
        versions = "—"
        if integration.distribution:
            versions = f"`{integration.distribution}` {integration.versions}".strip()
        patches = ", ".join(f"`{p}`" if "`" not in p else p for p in integration.patches) or "—"
        lines.append(
            f"| `{integration.name}` | {integration.library} | {versions} | "
            f"{integration.description} | {patches} |"
        )
    return "\n".join(lines) + "\n"

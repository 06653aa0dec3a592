"""A Django site for tests/integrations/test_django.py: its settings (``configure``, once per
process), URLs and views, sync and async, function- and class-based."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    JsonResponse,
    StreamingHttpResponse,
)
from django.urls import include, path, re_path
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from tracer import traced

SETTINGS: dict[str, Any] = {
    "DEBUG": False,
    "ROOT_URLCONF": __name__,
    "ALLOWED_HOSTS": ["*"],
    "SECRET_KEY": "only-for-tests",
    "MIDDLEWARE": ["django.middleware.csrf.CsrfViewMiddleware"],
    "INSTALLED_APPS": [],
    "DATABASES": {},
    "LOGGING_CONFIG": None,  # leave the process's logging as the other tests have it
}


def configure() -> None:
    """Django configured with ``SETTINGS`` and set up (a process does it once)."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(**SETTINGS)
        django.setup()


@traced
def work(text: str) -> str:
    return text.upper()


def price(request: HttpRequest, item: str) -> HttpResponse:
    return HttpResponse(work(item))


async def async_price(request: HttpRequest, item: str) -> HttpResponse:
    await asyncio.sleep(0)
    return HttpResponse(work(item))


class Things(View):
    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        return HttpResponse(work(name))


class AsyncThings(View):
    async def get(self, request: HttpRequest, name: str) -> HttpResponse:
        return HttpResponse(work(name))


def boom(request: HttpRequest) -> HttpResponse:
    raise KeyError("boom")


def missing(request: HttpRequest) -> HttpResponse:
    raise Http404("no such thing")


def unavailable(request: HttpRequest) -> HttpResponse:
    return HttpResponse("busy", status=503)


def stream(request: HttpRequest) -> StreamingHttpResponse:
    def body() -> Iterator[bytes]:
        yield b"first "
        yield work("second").encode()

    return StreamingHttpResponse(body())


async def async_stream(request: HttpRequest) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[bytes]:
        yield b"first "
        yield work("second").encode()

    return StreamingHttpResponse(body())


@csrf_exempt
def post(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"posted": work(request.body.decode())})


@traced
def already_traced(request: HttpRequest) -> HttpResponse:
    return HttpResponse("traced")


api = [path("orders/<int:number>", lambda request, number: HttpResponse(work(str(number))))]

urlpatterns = [
    path("price/<str:item>", price),
    path("async/price/<str:item>", async_price),
    path("things/<str:name>", Things.as_view()),
    path("async/things/<str:name>", AsyncThings.as_view()),
    path("boom", boom),
    path("missing", missing),
    path("unavailable", unavailable),
    path("stream", stream),
    path("async/stream", async_stream),
    path("post", post),
    path("traced", already_traced),
    re_path(r"^legacy/(?P<item>\w+)$", price),
    path("api/", include(api)),
]

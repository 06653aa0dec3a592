"""Web servers in their process models, started as users start them under ``tracer run`` with no
code change: Flask under ``gunicorn -w 2`` (with and without ``--preload``), FastAPI under
``uvicorn --workers 2``, a Django project under gunicorn and under ``runserver --noreload``, an
aiohttp app under ``python -m aiohttp.web``. Each worker sends its own events; each request is
one tree, whichever worker served it, continuing the caller's ``traceparent``."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.processes.web_support import (
    TRACEPARENT,
    get,
    named,
    nodes,
    pid,
    traced_server,
    trees,
)
from tests.support import cmr_server, free_port, wait_for, write_script

FLASK_APP = """
import os
import pathlib
import time

from flask import Flask

app = Flask(__name__)
HERE = pathlib.Path(__file__).parent


def wait_for_release(name):
    (HERE / f"arrived-{name}").touch()
    deadline = time.monotonic() + 60
    while not (HERE / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


@app.get("/hold/<name>")
def hold(name):
    return f"{name} {wait_for_release(name)}"
"""


def _seq(n: int) -> str:
    return f"{n:032x}"


@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-import", "preload"])
def test_flask_under_gunicorn_two_workers_one_tree_per_request(
    tmp_path: Path, preload: bool
) -> None:
    """Two requests held at once: each sync worker serves one, so both workers send."""
    write_script(tmp_path / "app.py", FLASK_APP)
    port = free_port()
    command = ["-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}", "app:app"]
    if preload:
        command.insert(2, "--preload")
    url = f"http://127.0.0.1:{port}/hold/"
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        with (
            traced_server(tmp_path, endpoint, "app", command, port, stop=signal.SIGTERM),
            ThreadPoolExecutor(2) as pool,
        ):
            held = [
                pool.submit(get, url + name, TRACEPARENT.format(seq=_seq(n)))
                for n, name in ((1, "a"), (2, "b"))
            ]
            wait_for(lambda: all((tmp_path / f"arrived-{n}").exists() for n in "ab"), 90)
            (tmp_path / "release").touch()
            bodies = [future.result(timeout=90) for future in held]
        served = trees(tmp_path / "cmr.sqlite")
    workers = {int(body.split()[1]) for body in bodies}
    assert len(workers) == 2
    assert set(served) == {_seq(1), _seq(2)}
    for n in (1, 2):
        root = served[_seq(n)]
        [request] = [node for node in nodes(root) if node["name"].endswith("GET /hold/<name>")]
        assert request["attributes"]["http.route"] == "/hold/<name>"
        assert request["attributes"]["http.response.status_code"] == 200
        [view] = request["children"]
        assert view["name"] == "app.hold"
        assert [c["name"] for c in view["children"]] == ["app.wait_for_release"]
        assert pid(request) in workers
    served_by = {pid(node) for seq in served for node in nodes(served[seq])} - {0}  # 0: remote
    assert served_by == workers


FASTAPI_APP = """
from fastapi import FastAPI

app = FastAPI()


def price_of(item):
    return len(item) * 1.5


@app.get("/price/{item}")
async def price(item: str):
    return {"item": item, "price": price_of(item)}


@app.get("/stock/{item}")
def stock(item: str):
    return {"item": item, "in_stock": price_of(item) > 5}
"""


def test_fastapi_under_uvicorn_workers_one_tree_per_request(tmp_path: Path) -> None:
    write_script(tmp_path / "api.py", FASTAPI_APP)
    port = free_port()
    command = ["-m", "uvicorn", "--workers", "2", "--port", str(port), "api:app"]
    requests = {_seq(n): f"/{kind}/item{n}" for n, kind in enumerate(["price", "stock"] * 3, 1)}
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        with traced_server(tmp_path, endpoint, "api", command, port, stop=signal.SIGTERM):
            for seq, path in requests.items():
                get(f"http://127.0.0.1:{port}{path}", TRACEPARENT.format(seq=seq))
        served = trees(tmp_path / "cmr.sqlite")
    assert set(served) == set(requests)
    for seq, path in requests.items():
        kind = path.split("/")[1]
        [request] = [n for n in nodes(served[seq]) if n["name"].endswith(f"GET /{kind}/{{item}}")]
        assert request["attributes"]["http.response.status_code"] == 200
        [endpoint_call] = named(request, f"api.{kind}")
        assert [c["name"] for c in endpoint_call["children"]] == ["api.price_of"]
        assert pid(endpoint_call) == pid(request)  # a sync endpoint too: under its request


DJANGO_FILES = {
    "settings.py": """
        SECRET_KEY = "test"
        DEBUG = False
        ALLOWED_HOSTS = ["127.0.0.1"]
        ROOT_URLCONF = "urls"
        INSTALLED_APPS = []
        MIDDLEWARE = []
        DATABASES = {}
        """,
    "urls.py": """
        from django.urls import path

        import views

        urlpatterns = [path("price/<str:item>", views.price)]
        """,
    "views.py": """
        from django.http import JsonResponse


        def price_of(item):
            return len(item) * 1.5


        def price(request, item):
            return JsonResponse({"item": item, "price": price_of(item)})
        """,
    "wsgi.py": """
        from django.core.wsgi import get_wsgi_application

        application = get_wsgi_application()
        """,
    "manage.py": """
        import sys

        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
        """,
}


@pytest.mark.parametrize("server", ["gunicorn", "runserver"])
def test_django_project_one_tree_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str
) -> None:
    for name, source in DJANGO_FILES.items():
        write_script(tmp_path / name, source)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "settings")
    port = free_port()
    if server == "gunicorn":
        command = ["-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}", "wsgi:application"]
        stop = signal.SIGTERM
    else:
        command = ["manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"]
        stop = signal.SIGINT
    requests = {_seq(n): f"/price/item{n}" for n in range(1, 4)}
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        with traced_server(tmp_path, endpoint, "views", command, port, stop=stop):
            for seq, path in requests.items():
                body = get(f"http://127.0.0.1:{port}{path}", TRACEPARENT.format(seq=seq))
                assert '"price"' in body
        served = trees(tmp_path / "cmr.sqlite")
    assert set(served) == set(requests)
    for seq in requests:
        [request] = [n for n in nodes(served[seq]) if n["name"].endswith("GET /price/<str:item>")]
        assert request["attributes"]["http.response.status_code"] == 200
        [view] = named(request, "views.price")
        assert [c["name"] for c in view["children"]] == ["views.price_of"]


AIOHTTP_APP = """
from aiohttp import web


def price_of(item):
    return len(item) * 1.5


async def price(request):
    return web.json_response({"price": price_of(request.match_info["item"])})


def init(argv):
    app = web.Application()
    app.router.add_get("/price/{item}", price)
    return app
"""


def test_aiohttp_app_one_tree_per_request(tmp_path: Path) -> None:
    write_script(tmp_path / "shop.py", AIOHTTP_APP)
    port = free_port()
    command = ["-m", "aiohttp.web", "-H", "127.0.0.1", "-P", str(port), "shop:init"]
    requests = {_seq(n): f"/price/item{n}" for n in range(1, 3)}
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        with traced_server(tmp_path, endpoint, "shop", command, port, stop=signal.SIGINT):
            for seq, path in requests.items():
                get(f"http://127.0.0.1:{port}{path}", TRACEPARENT.format(seq=seq))
        served = trees(tmp_path / "cmr.sqlite")
    [startup] = set(served) - set(requests)  # the app factory, a traced function of shop.py
    assert served[startup]["name"] == "shop.init"
    for seq in requests:
        [request] = [n for n in nodes(served[seq]) if n["name"].endswith("GET /price/{item}")]
        [handler] = named(request, "shop.price")
        assert [c["name"] for c in handler["children"]] == ["shop.price_of"]

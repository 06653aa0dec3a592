"""Two web services, one tree per request: a Flask storefront under ``gunicorn -w 2`` and a
FastAPI pricing service under ``uvicorn --workers 2``, with no code change; with ``--tasks``, a
third tier: a Celery worker (prefork, Debian's ``redis-server`` as its broker) that the pricing
service has compute the tax of every quote.

    pip install flask fastapi uvicorn gunicorn httpx requests 'celery[redis]'
    tracer run --include storefront,pricing examples/web_shop.py
    tracer run --include storefront,pricing,tasks examples/web_shop.py --tasks

This script starts both services (from ``examples/web/``) the way their users start them,
places three orders at the storefront and stops the services. Under ``tracer run`` every Python
process it starts is traced too, so each order is one tree across three processes or more: the
order placed here (urllib's request), the storefront's ``GET /checkout`` in a gunicorn worker,
its ``requests`` call to the pricing service's ``GET /quote`` in a uvicorn worker, whose
``httpx`` calls come back to the storefront's ``GET /stock/<item>`` in either gunicorn worker.
With ``--tasks`` the quote's tax is a Celery task: the tree goes on from the uvicorn worker into a
prefork child of the Celery worker, the hop showing the task's queue wait. ``cmr show`` draws it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SERVICES = Path(__file__).with_name("web")
CARTS = (["apple", "mug"], ["coffee", "apple"], ["mug"])


def free_ports(count: int) -> list[int]:
    """``count`` different ports nothing listens on, below Linux's ephemeral range (32768-60999):
    the kernel hands ports from that range to outgoing connections, which could take one between
    this check and the server's bind. Each stays bound until all are chosen, so no two are the same
    (two services given one port would have the second fail while the first answers for both)."""
    probes: list[socket.socket] = []
    try:
        for _ in range(100 * count):
            if len(probes) == count:
                break
            probe = socket.socket()
            try:
                probe.bind(("127.0.0.1", random.randrange(20_000, 32_768)))
            except OSError:  # in use
                probe.close()
                continue
            probes.append(probe)
        ports: list[int] = [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()
    if len(ports) < count:
        raise SystemExit(f"no {count} free ports in 20000-32767")
    return ports


def wait_until_listening(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{process.args!r} exited with {process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port} after {timeout_s} s")


def place_order(storefront: str, cart: list[str]) -> dict[str, object]:
    url = f"{storefront}/checkout?items={','.join(cart)}"
    with urllib.request.urlopen(url, timeout=60) as response:
        order: dict[str, object] = json.load(response)
        return order


def start_redis(directory: str, port: int) -> subprocess.Popen[bytes]:
    """Debian's redis-server on ``port``, for Celery's broker and results."""
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("--tasks needs redis-server on PATH (apt install redis-server)")
    command = [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", directory]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", action="store_true", help="add the Celery tier")
    with_tasks = parser.parse_args().tasks
    store_port, pricing_port, redis_port = free_ports(3)
    env = dict(
        os.environ,
        PRICING_URL=f"http://127.0.0.1:{pricing_port}",
        STOREFRONT_URL=f"http://127.0.0.1:{store_port}",
    )
    python = sys.executable
    services: list[tuple[subprocess.Popen[bytes], int | None]] = []
    scratch = tempfile.mkdtemp(prefix="web-shop-")
    try:
        if with_tasks:
            services.append((start_redis(scratch, redis_port), redis_port))
            env["TASKS_BROKER_URL"] = f"redis://127.0.0.1:{redis_port}/0"
            worker = [python, "-m", "celery", "-A", "tasks", "--quiet", "worker",
                      "--pool=prefork", "-c", "2", "--loglevel=warning"]  # fmt: skip
            started = subprocess.Popen(worker, cwd=SERVICES, env=env, stdout=subprocess.DEVNULL)
            services.append((started, None))
        storefront = [python, "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{store_port}",
                      "--log-level", "warning", "storefront:app"]  # fmt: skip
        pricing = [python, "-m", "uvicorn", "--workers", "2", "--host", "127.0.0.1", "--port",
                   str(pricing_port), "--log-level", "warning", "pricing:app"]  # fmt: skip
        services.append((subprocess.Popen(storefront, cwd=SERVICES, env=env), store_port))
        services.append((subprocess.Popen(pricing, cwd=SERVICES, env=env), pricing_port))
        for service, port in services:
            if port is not None:
                wait_until_listening(port, service, timeout_s=60)
        for cart in CARTS:
            order = place_order(f"http://127.0.0.1:{store_port}", cart)
            print(f"{','.join(cart)}: total {order['total']}, unavailable {order['unavailable']}")
    finally:
        for service, _ in reversed(services):  # redis last: the worker drains from it
            service.send_signal(signal.SIGTERM)  # each stops gracefully, flushing what it traced
            service.wait(60)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

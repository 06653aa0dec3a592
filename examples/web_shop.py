"""Two web services, one tree per request: a Flask storefront under ``gunicorn -w 2`` and a
FastAPI pricing service under ``uvicorn --workers 2``, with no code change.

    pip install flask fastapi uvicorn gunicorn httpx requests
    tracer run --include storefront,pricing examples/web_shop.py

This script starts both services (from ``examples/web/``) the way their users start them,
places three orders at the storefront and stops the services. Under ``tracer run`` every Python
process it starts is traced too, so each order is one tree across three processes or more: the
order placed here (urllib's request), the storefront's ``GET /checkout`` in a gunicorn worker,
its ``requests`` call to the pricing service's ``GET /quote`` in a uvicorn worker, whose
``httpx`` calls come back to the storefront's ``GET /stock/<item>`` in either gunicorn worker.
``cmr show`` draws it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SERVICES = Path(__file__).with_name("web")
CARTS = (["apple", "mug"], ["coffee", "apple"], ["mug"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def main() -> None:
    store_port, pricing_port = free_port(), free_port()
    env = dict(
        os.environ,
        PRICING_URL=f"http://127.0.0.1:{pricing_port}",
        STOREFRONT_URL=f"http://127.0.0.1:{store_port}",
    )
    python = sys.executable
    services = [
        subprocess.Popen(
            [python, "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{store_port}",
             "--log-level", "warning", "storefront:app"],
            cwd=SERVICES, env=env,
        ),
        subprocess.Popen(
            [python, "-m", "uvicorn", "--workers", "2", "--host", "127.0.0.1",
             "--port", str(pricing_port), "--log-level", "warning", "pricing:app"],
            cwd=SERVICES, env=env,
        ),
    ]  # fmt: skip
    try:
        for port, service in zip((store_port, pricing_port), services, strict=True):
            wait_until_listening(port, service, timeout_s=60)
        for cart in CARTS:
            order = place_order(f"http://127.0.0.1:{store_port}", cart)
            print(f"{','.join(cart)}: total {order['total']}, unavailable {order['unavailable']}")
    finally:
        for service in services:
            service.send_signal(signal.SIGTERM)  # both stop gracefully, flushing what they traced
        for service in services:
            service.wait(60)


if __name__ == "__main__":
    main()

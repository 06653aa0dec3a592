"""Two services, one sequence: a storefront calls an inventory service over HTTP.

    tracer run examples/services.py

The storefront (this file) starts ``inventory_service.py`` as a separate process, then handles a
checkout that asks the inventory about each item with ``urllib``. ``tracer.inject`` puts a W3C
``traceparent`` header on each request; the service extracts it, so ``cmr show`` draws one tree
through both processes, each remote call marked ``→ remote``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import tracer

SERVICE = Path(__file__).with_name("inventory_service.py")


def check_stock(port: int, item: str) -> int:
    headers: dict[str, str] = {}
    tracer.inject(headers)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/stock/{item}", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(json.load(response)["in_stock"])


def checkout(port: int, cart: list[str]) -> list[str]:
    return [item for item in cart if check_stock(port, item) > 0]


if __name__ == "__main__":
    # Started from module-level code, outside any sequence: the service is not part of one
    # (a process started inside a traced call continues that call's sequence).
    service = subprocess.Popen([sys.executable, str(SERVICE), "0"], stdout=subprocess.PIPE)
    assert service.stdout is not None
    port = int(service.stdout.readline())
    try:
        print("available:", ", ".join(checkout(port, ["apple", "coffee", "mug"])))
    finally:
        service.send_signal(signal.SIGINT)  # the service stops and flushes what it traced
        service.wait(30)

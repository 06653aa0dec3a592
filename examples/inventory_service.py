"""A tiny inventory HTTP service (stdlib only), traced: it continues the caller's sequence.

Started by ``examples/services.py``; on its own: ``python examples/inventory_service.py 8001``.
Each request's W3C ``traceparent`` header is extracted (``tracer.continue_from``), so its
invocations join the sequence of whoever called, under the caller's hand-off.
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import tracer

STOCK = {"apple": 12, "coffee": 0, "mug": 3}


@tracer.traced
def lookup(item: str) -> dict[str, object]:
    time.sleep(0.005)  # the database
    return {"item": item, "in_stock": STOCK.get(item, 0)}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        with tracer.continue_from(self.headers):
            body = json.dumps(lookup(self.path.rsplit("/", 1)[-1])).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the example's output to the point


def main(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(server.server_address[1], flush=True)  # the port, for whoever started us
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)

"""The storefront: a Flask app (run by gunicorn in ``examples/web_shop.py``).

``GET /checkout?items=apple,mug`` asks the pricing service for a quote (``requests``), which in
turn asks this storefront for each item's stock: one request crosses the storefront, the pricing
service and the storefront again. Nothing here mentions the tracer.
"""

from __future__ import annotations

import logging
import os

import requests
from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

PRICING_URL = os.environ.get("PRICING_URL", "http://127.0.0.1:8001")
STOCK = {"apple": 12, "coffee": 0, "mug": 3}

app = Flask(__name__)
log = logging.getLogger("storefront")


@app.get("/stock/<item>")
def stock_level(item: str) -> ResponseReturnValue:
    return jsonify(item=item, in_stock=STOCK.get(item, 0))


@app.get("/checkout")
def checkout() -> ResponseReturnValue:
    items = request.args.get("items", "").split(",")
    quote = quote_cart(items)
    if quote["unavailable"]:
        log.warning("unavailable: %s", ", ".join(quote["unavailable"]))
    return jsonify(total=round(quote["total"], 2), unavailable=quote["unavailable"])


def quote_cart(items: list[str]) -> dict[str, object]:
    response = requests.get(f"{PRICING_URL}/quote", params={"items": ",".join(items)}, timeout=30)
    response.raise_for_status()
    quote: dict[str, object] = response.json()
    return quote

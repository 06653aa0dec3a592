"""The pricing service: a FastAPI app (run by ``uvicorn --workers 2`` in ``examples/web_shop.py``).

``GET /quote?items=apple,mug`` prices each item and asks the storefront whether it is in stock
(``httpx``, asynchronously); with ``TASKS_BROKER_URL`` set (``web_shop.py --tasks``) it also has a
Celery worker compute the tax. Nothing here mentions the tracer.
"""

from __future__ import annotations

import asyncio
import os

import httpx
from fastapi import FastAPI

STOREFRONT_URL = os.environ.get("STOREFRONT_URL", "http://127.0.0.1:8000")
PRICES = {"apple": 0.5, "coffee": 7.25, "mug": 9.0}

app = FastAPI()


@app.get("/quote")
async def quote(items: str) -> dict[str, object]:
    total = 0.0
    unavailable = []
    async with httpx.AsyncClient(base_url=STOREFRONT_URL, timeout=30) as storefront:
        for item in items.split(","):
            if await in_stock(storefront, item):
                total += price(item)
            else:
                unavailable.append(item)
    if os.environ.get("TASKS_BROKER_URL"):
        total += await asyncio.to_thread(tax_of, total)
    return {"total": total, "unavailable": unavailable}


def tax_of(total: float) -> float:
    from tasks import tax  # the Celery app, only when there is a broker

    result: float = tax.delay(total).get(timeout=30)
    return result


async def in_stock(storefront: httpx.AsyncClient, item: str) -> bool:
    response = await storefront.get(f"/stock/{item}")
    response.raise_for_status()
    return int(response.json()["in_stock"]) > 0


def price(item: str) -> float:
    return PRICES[item]

"""The tax worker: a Celery app (run by ``celery worker`` in ``examples/web_shop.py --tasks``).

The pricing service queues ``tax`` for every quote and waits for its result. Nothing here mentions
the tracer.
"""

from __future__ import annotations

import os

from celery import Celery

BROKER_URL = os.environ.get("TASKS_BROKER_URL", "redis://127.0.0.1:6379/0")
RATES = {"food": 0.07, "other": 0.2}

app = Celery("tasks", broker=BROKER_URL, backend=BROKER_URL)


@app.task
def tax(total: float, kind: str = "other") -> float:
    return round(total * rate(kind), 2)


def rate(kind: str) -> float:
    return RATES[kind]

"""A known sequence across threads and processes, for the report's browser tests and the guide's
screenshots: ``checkout`` hands items to a thread pool (one of them logs a warning and raises,
caught) and tax computations to a process pool, and busy-loops in untraced code so the sampler has
frames to merge."""

from __future__ import annotations

SCRIPT = """
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import tracer

tracer.configure(instrument=True, sample_interval_ms=2)


def spin(seconds):
    deadline = time.perf_counter() + seconds
    total = 0
    while time.perf_counter() < deadline:
        total += sum(i * i for i in range(200))
    return total


@tracer.traced
def load_cart(n):
    spin(0.01)
    return list(range(n))


@tracer.traced
def price_item(item):
    spin(0.006)
    if item == 3:
        logging.getLogger("shop.pricing").warning("no price for item %d", item)
        raise LookupError(f"no price for item {item}")
    return item * 10


#: Both tax computations wait here for each other: a worker blocked in one cannot take the
#: other, so they run in the pool's two workers however the machine schedules them (without it,
#: a worker that finished its first could take the second too, on a loaded machine).
BOTH = multiprocessing.get_context("fork").Barrier(2)


@tracer.traced
def compute_tax(amount):
    BOTH.wait(60)
    spin(0.01)
    return amount // 5


@tracer.traced
def safe_price(item):
    try:
        return price_item(item)
    except LookupError:
        return 0


@tracer.traced
def checkout(threads, processes):
    items = load_cart(4)
    prices = list(threads.map(safe_price, items))
    taxes = [f.result() for f in [processes.submit(compute_tax, p) for p in prices[:2]]]
    spin(0.01)
    return sum(prices) + sum(taxes)


if __name__ == "__main__":
    context = multiprocessing.get_context("fork")
    with ThreadPoolExecutor(2, thread_name_prefix="pricer") as threads, ProcessPoolExecutor(
        2, mp_context=context
    ) as processes:
        # Start both workers before the sequence: a pool spawns a worker only when none is idle,
        # so two tasks at once, each busy for a while, make it start the second.
        for started in [processes.submit(spin, 0.05) for _ in range(2)]:
            started.result()
        print(checkout(threads, processes))
"""

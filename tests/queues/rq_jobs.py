"""Job functions for the in-process RQ tests (a worker finds them by their dotted names)."""

from __future__ import annotations

import tracer


def double(x: int) -> int:
    return x * 2


@tracer.traced
def traced_double(x: int) -> int:
    return x * 2


def add(x: int, y: int) -> int:
    return traced_double(x) + y


@tracer.traced
def traced_add(x: int, y: int) -> int:
    return traced_double(x) + y


def fail(message: str) -> None:
    raise ValueError(message)


class Counter:
    """A job's function may be a method of an object RQ stores with the job."""

    def __init__(self, start: int) -> None:
        self.start = start

    @tracer.traced
    def count(self, step: int) -> int:
        return self.start + traced_double(step)

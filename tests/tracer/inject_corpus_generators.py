"""The corpus's generators, coroutines and async generators, for the scenarios in
``inject_corpus_scenarios.py``: yield, send, throw and close, yield from, await on a future-like
object, async for and async with, and asyncio running them.

Like the rest of the corpus it imports nothing from the tracer, so that a bare 3.12 runs it. Its
code is what ruff flags (a generator raising StopIteration...): the noqa below.
"""

# ruff: noqa: PLR1708

from __future__ import annotations

import asyncio

from tests.tracer.inject_corpus_functions import Manager

# -- generators ---------------------------------------------------------------------------------


def gen_simple(n):
    for i in range(n):
        sent = yield i
        if sent is not None:
            yield ("got", sent)
    return "done"


def gen_try():
    try:
        yield 1
        yield 2
    except KeyError:
        yield "handled"
    finally:
        FINALLY_RAN.append("gen_try")


FINALLY_RAN: list[str] = []


def gen_raises():
    yield 1
    raise ValueError("from gen")


def gen_stop_iteration():
    yield 1
    raise StopIteration("inside")


def gen_catches_and_returns():
    try:
        yield "inner"
    except KeyError:
        return "returned"


def gen_delegates():
    first = yield from gen_simple(2)
    yield first
    second = yield from gen_catches_and_returns()
    yield second
    yield from [7, 8]
    return "outer done"


def gen_with(suppress):
    with Manager(suppress):
        yield "in with"
        raise KeyError("w")
    yield "after with"


# -- coroutines and async generators ------------------------------------------------------------


class FutureLike:
    """Awaiting it yields it to the driver, which sets ``result`` and sends."""

    def __init__(self):
        self.result = None

    def __await__(self):
        yield self
        return self.result


async def co_leaf(x):
    return x * 2


async def co_awaits(x):
    doubled = await co_leaf(x)
    future = FutureLike()
    got = await future
    return doubled, got


async def co_raises():
    await FutureLike()
    raise KeyError("co")


async def co_catches():
    try:
        await FutureLike()
    except ValueError as e:
        return ("caught", e.args)
    return "not thrown"


async def co_calls_raiser():
    try:
        await co_raises()
    except KeyError:
        return "caught below"


async def agen(n):
    try:
        for i in range(n):
            sent = yield i
            if sent == "await":
                await FutureLike()
    except KeyError:
        yield "handled"
    finally:
        FINALLY_RAN.append("agen")


async def asyncio_main():
    await asyncio.sleep(0)
    results = [await co_leaf(1)]
    task = asyncio.ensure_future(co_sleeps_forever())
    await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        results.append("cancelled")
    async for value in agen(2):
        results.append(value)
    return results


async def co_sleeps_forever():
    await asyncio.sleep(3600)


class AsyncManager:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        return False


async def co_async_for_with(n):
    got = []
    async with AsyncManager():
        async for value in agen(n):
            got.append(value)
            if value == 1:
                await FutureLike()
    return got

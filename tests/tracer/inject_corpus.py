"""A corpus of functions and the scenarios that drive them, for tests/tracer/test_inject.py.

The same file runs on Python 3.11 (imported by the test: its functions instrumented with
``tracer._core.inject``, hooks recording) and as a script on Python 3.12, where it records
what ``sys.monitoring`` reports for the same functions and scenarios and prints it as JSON: the
test compares the two sequences. It imports nothing from the tracer, so that a bare 3.12 runs it.
(3.13 reports fewer events: it closes a generator suspended outside any try without resuming it.)
Its code is what ruff flags (returns in finally, a lambda assigned...): the noqa below.

Each event is ``[event, qualname, detail]``: for yield and return a summary of the value, for
throw and unwind the exception's type and args.
"""

# ruff: noqa: B012, E731, TRY301, RET504, SIM107, PLR0912, PLR1708

from __future__ import annotations

import asyncio
import gc
import json
import sys
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

# -- plain functions ----------------------------------------------------------------------------


def plain(a, b=2, *args, k=3, **kw):
    return a + b + k + len(args) + len(kw)


def early(x):
    if x > 0:
        return "pos"
    if x < 0:
        return "neg"
    return "zero"


def caught(x):
    try:
        raise KeyError(x)
    except KeyError as e:
        return ("caught", e.args[0])


def escapes(x):
    y = x + 1
    raise ValueError(y)


def passes_through(x):
    z = escapes(x)
    return z


def finally_return(x):
    try:
        return x
    finally:
        return "finally"


def finally_swallows(x):
    try:
        raise ValueError(x)
    finally:
        return "swallowed"


def finally_reraises(x):
    done = []
    try:
        return 1 // x
    finally:
        done.append(x)


class Manager:
    def __init__(self, suppress):
        self.suppress = suppress

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return self.suppress


def with_statement(suppress):
    with Manager(suppress) as manager:
        raise KeyError(manager.suppress)
    return "after"


def loops(n):
    total = 0
    for i in range(n):
        if i % 2:
            continue
        if i > 6:
            break
        total += i
    else:
        total = -1
    while n:
        n -= 1
        if n == 2:
            break
    return total, n


def make_closure(x):
    cell = [x]

    def inner(y):
        cell[0] += y
        return cell[0] + x

    return len(cell)


def _closure_factory(x):
    cell = [x]

    def closure(y):
        return cell[0] + x + y

    return closure


closure = _closure_factory(10)  # free vars: cell and x


def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


square = lambda v: v * v


class Methods:
    def method(self, x):
        return (self.__class__.__name__, x)

    @classmethod
    def klass(cls, x):
        return (cls.__name__, x)

    @staticmethod
    def static(x):
        return x + 1


class Sub(Methods):
    def method(self, x):
        return ("sub", super().method(x))


def matches(value):
    match value:
        case {"kind": "point", "x": int(x), "y": int(y)}:
            return ("point", x + y)
        case [first, *rest] if rest:
            return ("list", first, len(rest))
        case str() | bytes():
            return "text"
        case _:
            return sum(v for v in range(3))


def warns(message):
    warnings.warn(message, UserWarning, stacklevel=2)
    return "warned"


def caller_name():
    return sys._getframe(1).f_code.co_name


def many_jumps(x):
    total = 0
    for step in range(3):
        if x == 0:
            total += x * 0 + step - (x // 1) * 0
        elif x == 1:
            total += x * 1 + step - (x // 2) * 1
        elif x == 2:
            total += x * 2 + step - (x // 3) * 2
        elif x == 3:
            total += x * 3 + step - (x // 4) * 3
        elif x == 4:
            total += x * 4 + step - (x // 5) * 4
        elif x == 5:
            total += x * 5 + step - (x // 6) * 5
        elif x == 6:
            total += x * 6 + step - (x // 7) * 6
        elif x == 7:
            total += x * 7 + step - (x // 8) * 0
        elif x == 8:
            total += x * 8 + step - (x // 9) * 1
        elif x == 9:
            total += x * 9 + step - (x // 10) * 2
        elif x == 10:
            total += x * 10 + step - (x // 11) * 3
        elif x == 11:
            total += x * 11 + step - (x // 12) * 4
        elif x == 12:
            total += x * 12 + step - (x // 13) * 5
        elif x == 13:
            total += x * 13 + step - (x // 14) * 6
        elif x == 14:
            total += x * 14 + step - (x // 15) * 0
        elif x == 15:
            total += x * 15 + step - (x // 16) * 1
        elif x == 16:
            total += x * 16 + step - (x // 17) * 2
        elif x == 17:
            total += x * 17 + step - (x // 18) * 3
        elif x == 18:
            total += x * 18 + step - (x // 19) * 4
        elif x == 19:
            total += x * 19 + step - (x // 20) * 5
        elif x == 20:
            total += x * 20 + step - (x // 21) * 6
        elif x == 21:
            total += x * 21 + step - (x // 22) * 0
        elif x == 22:
            total += x * 22 + step - (x // 23) * 1
        elif x == 23:
            total += x * 23 + step - (x // 24) * 2
        elif x == 24:
            total += x * 24 + step - (x // 25) * 3
        elif x == 25:
            total += x * 25 + step - (x // 26) * 4
        elif x == 26:
            total += x * 26 + step - (x // 27) * 5
        elif x == 27:
            total += x * 27 + step - (x // 28) * 6
        elif x == 28:
            total += x * 28 + step - (x // 29) * 0
        elif x == 29:
            total += x * 29 + step - (x // 30) * 1
        elif x == 30:
            total += x * 30 + step - (x // 31) * 2
        elif x == 31:
            total += x * 31 + step - (x // 32) * 3
        elif x == 32:
            total += x * 32 + step - (x // 33) * 4
        elif x == 33:
            total += x * 33 + step - (x // 34) * 5
        elif x == 34:
            total += x * 34 + step - (x // 35) * 6
        elif x == 35:
            total += x * 35 + step - (x // 36) * 0
        elif x == 36:
            total += x * 36 + step - (x // 37) * 1
        elif x == 37:
            total += x * 37 + step - (x // 38) * 2
        elif x == 38:
            total += x * 38 + step - (x // 39) * 3
        elif x == 39:
            total += x * 39 + step - (x // 40) * 4
        else:
            total -= step
        x = (x + step) % 41
    return total


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


# -- what is traced and how it is driven ---------------------------------------------------------

TRACED: list[Callable[..., Any]] = [
    plain, early, caught, escapes, passes_through, finally_return, finally_swallows,
    finally_reraises, with_statement, loops, make_closure, closure, fact, is_even, is_odd,
    square, Methods.method, Methods.klass, Methods.static, warns, caller_name, many_jumps,
    gen_simple, gen_try, gen_raises, gen_stop_iteration, gen_catches_and_returns, gen_delegates,
    gen_with, co_leaf, co_awaits, co_raises, co_catches, co_calls_raiser, agen, asyncio_main,
    co_sleeps_forever, Sub.method, matches, AsyncManager.__aenter__, AsyncManager.__aexit__,
    co_async_for_with,
]  # fmt: skip


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The result, or what was raised (type, args, and the traceback's frames and lines)."""
    try:
        return ["ok", summary(fn(*args, **kwargs))]
    except BaseException as e:
        return ["raised", describe(e), _frames(e)]


def _frames(e: BaseException) -> list[Any]:
    tb, frames = e.__traceback__, []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == __file__:
            frames.append([tb.tb_frame.f_code.co_name, tb.tb_lineno])
        tb = tb.tb_next
    return frames


def summary(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple | list):
        return [summary(v) for v in value]
    if isinstance(value, BaseException):
        return describe(value)
    return type(value).__name__


def describe(e: BaseException) -> str:
    return f"{type(e).__name__}{summary(list(e.args))}"


def _steps(gen: Any, *steps: tuple[str, Any]) -> list[Any]:
    """Drives a generator (or a coroutine, or an async generator's awaitable) step by step."""
    out = []
    for how, arg in steps:
        if how == "next":
            out.append(_call(next, gen))
        elif how == "send":
            out.append(_call(gen.send, arg))
        elif how == "throw":
            out.append(_call(gen.throw, arg))
        elif how == "close":
            out.append(_call(gen.close))
    return out


def _run_coro(coro: Coroutine[Any, Any, Any], results: list[Any]) -> Any:
    """Runs a coroutine, answering each FutureLike with the next of ``results`` (an exception
    is thrown in)."""
    outcome: list[Any] = []
    try:
        yielded = coro.send(None)
        for result in results:
            outcome.append(summary(yielded))
            if isinstance(result, BaseException):
                yielded = coro.throw(result)
            else:
                yielded.result = result
                yielded = coro.send(None)
        coro.close()
        outcome.append("left suspended")
    except StopIteration as e:
        outcome.append(["returned", summary(e.value)])
    except BaseException as e:
        outcome.append(["raised", describe(e), _frames(e)])
    return outcome


def _async_steps(agen_obj: Any, *steps: tuple[str, Any]) -> list[Any]:
    out = []
    for how, arg in steps:
        if how == "asend":
            awaitable = agen_obj.asend(arg)
        elif how == "athrow":
            awaitable = agen_obj.athrow(arg)
        else:
            awaitable = agen_obj.aclose()
        out.append(_run_coro(awaitable, [7]))
    return out


def _abandoned() -> list[Any]:
    gen = gen_simple(5)
    first = next(gen)
    del gen
    gc.collect()
    return [first]


def _warning() -> list[Any]:
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        warns("careful")
    return [[w.filename == __file__, w.lineno] for w in caught_warnings]


SCENARIOS: dict[str, Callable[[], Any]] = {
    "plain": lambda: [_call(plain, 1), _call(plain, 1, 2, 3, 4, k=5, z=6)],
    "early": lambda: [_call(early, 1), _call(early, -1), _call(early, 0)],
    "caught": lambda: _call(caught, "k"),
    "escapes": lambda: _call(escapes, 1),
    "passes_through": lambda: _call(passes_through, 1),
    "finally_return": lambda: _call(finally_return, 1),
    "finally_swallows": lambda: _call(finally_swallows, 1),
    "finally_reraises": lambda: [_call(finally_reraises, 1), _call(finally_reraises, 0)],
    "with_statement": lambda: [_call(with_statement, True), _call(with_statement, False)],
    "loops": lambda: [_call(loops, 10), _call(loops, 3)],
    "make_closure": lambda: _call(make_closure, 1),
    "closure": lambda: [_call(closure, 1), _call(closure, 2)],
    "recursion": lambda: [_call(fact, 4), _call(is_even, 3)],
    "lambda": lambda: _call(square, 3),
    "methods": lambda: [
        _call(Methods().method, 1), _call(Methods.klass, 2), _call(Methods.static, 3)
    ],
    "super": lambda: _call(Sub().method, 1),
    "match": lambda: [_call(matches, v) for v in ({"kind": "point", "x": 1, "y": 2}, [1, 2],
                                                   "s", 4.5)],
    "warning": _warning,
    "caller_name": lambda: _call(caller_name),
    "many_jumps": lambda: [_call(many_jumps, x) for x in (0, 5, 39, 40, 77)],
    "gen_exhausted": lambda: _call(list, gen_simple(3)),
    "gen_send": lambda: _steps(gen_simple(3), ("next", None), ("send", "a"), ("next", None),
                               ("next", None), ("next", None)),
    "gen_throw_caught": lambda: _steps(gen_try(), ("next", None), ("throw", KeyError("t")),
                                       ("next", None)),
    "gen_throw_uncaught": lambda: _steps(gen_try(), ("next", None), ("throw", ValueError("t"))),
    "gen_close_in_try": lambda: _steps(gen_try(), ("next", None), ("close", None)),
    "gen_close_outside_try": lambda: _steps(gen_simple(3), ("next", None), ("close", None)),
    "gen_close_unstarted": lambda: _steps(gen_simple(3), ("close", None)),
    "gen_throw_unstarted": lambda: _steps(gen_simple(3), ("throw", KeyError("u"))),
    "gen_close_exhausted": lambda: _steps(gen_raises(), ("next", None), ("next", None),
                                          ("close", None), ("next", None)),
    "gen_stop_iteration": lambda: _steps(gen_stop_iteration(), ("next", None), ("next", None)),
    "gen_abandoned": _abandoned,
    "gen_delegates": lambda: _call(list, gen_delegates()),
    "gen_delegates_send": lambda: _steps(gen_delegates(), ("next", None), ("send", "s"),
                                         ("next", None), ("next", None)),
    "gen_delegated_throw_returns": lambda: _steps(
        gen_delegates(), ("next", None), ("next", None), ("next", None), ("next", None),
        ("throw", KeyError("d")), ("next", None)),
    "gen_delegated_throw_raises": lambda: _steps(gen_delegates(), ("next", None),
                                                 ("throw", ValueError("d"))),
    "gen_delegated_throw_to_iterator": lambda: _steps(
        gen_delegates(), *[("next", None)] * 6, ("throw", ValueError("i"))),
    "gen_delegated_close": lambda: _steps(gen_delegates(), ("next", None), ("close", None)),
    "gen_with": lambda: [_call(list, gen_with(True)), _call(list, gen_with(False))],
    "gen_with_close": lambda: _steps(gen_with(False), ("next", None), ("close", None)),
    "co_awaits": lambda: _run_coro(co_awaits(2), ["r"]),
    "co_raises": lambda: _run_coro(co_raises(), [None]),
    "co_thrown_caught": lambda: _run_coro(co_catches(), [ValueError("v")]),
    "co_thrown_uncaught": lambda: _run_coro(co_catches(), [KeyError("k")]),
    "co_exception_below": lambda: _run_coro(co_calls_raiser(), [None]),
    "co_closed": lambda: _run_coro(co_awaits(1), []),
    "co_async_for_with": lambda: _run_coro(co_async_for_with(3), [None]),
    "co_async_for_thrown": lambda: _run_coro(co_async_for_with(3), [KeyError("in for")]),
    "co_async_for_cancelled": lambda: _run_coro(co_async_for_with(3), [GeneratorExit()]),
    "agen": lambda: _async_steps(agen(3), ("asend", None), ("asend", "x"), ("asend", "await"),
                                 ("asend", None), ("asend", None)),
    "agen_athrow_caught": lambda: _async_steps(agen(3), ("asend", None),
                                               ("athrow", KeyError("a")), ("asend", None)),
    "agen_athrow_uncaught": lambda: _async_steps(agen(3), ("asend", None),
                                                 ("athrow", ValueError("a"))),
    "agen_aclose": lambda: _async_steps(agen(3), ("asend", None), ("aclose", None)),
    "asyncio": lambda: _call(asyncio.run, asyncio_main()),
}  # fmt: skip


def run_scenarios(events: list[Any]) -> dict[str, Any]:
    """{scenario: {"outcome": ..., "events": [...]}}; ``events`` is where the hooks append."""
    results = {}
    for name, scenario in SCENARIOS.items():
        gc.collect()
        del events[:]
        FINALLY_RAN.clear()
        outcome = scenario()
        gc.collect()
        results[name] = {"outcome": [outcome, list(FINALLY_RAN)], "events": list(events)}
    del events[:]
    return results


def traced_codes() -> list[Any]:
    return [fn.__code__ for fn in TRACED]


def record_with_monitoring() -> dict[str, Any]:
    """Python 3.12: the events sys.monitoring reports for TRACED, scenario by scenario."""
    monitoring = sys.monitoring  # type: ignore[attr-defined]
    events = monitoring.events
    tool = monitoring.PROFILER_ID
    names = {
        events.PY_START: "start", events.PY_RESUME: "resume", events.PY_THROW: "throw",
        events.PY_YIELD: "yield", events.PY_RETURN: "return", events.PY_UNWIND: "unwind",
    }  # fmt: skip
    codes = set(traced_codes())
    log: list[Any] = []

    def callback(event: int) -> Callable[..., None]:
        def record(code: Any, _offset: int, *value: Any) -> None:
            if code in codes:
                log.append([names[event], code.co_qualname, *map(summary, value)])

        return record

    monitoring.use_tool_id(tool, "inject corpus")
    try:
        for event in names:
            monitoring.register_callback(tool, event, callback(event))
        # PY_THROW and PY_UNWIND cannot be local events: global, filtered by code.
        monitoring.set_events(tool, events.PY_THROW | events.PY_UNWIND)
        local = events.PY_START | events.PY_RESUME | events.PY_YIELD | events.PY_RETURN
        for code in codes:
            monitoring.set_local_events(tool, code, local)
        return run_scenarios(log)
    finally:
        monitoring.set_events(tool, 0)
        for code in codes:
            monitoring.set_local_events(tool, code, 0)
        monitoring.free_tool_id(tool)


if __name__ == "__main__":
    results = record_with_monitoring()
    json.dump({name: result["events"] for name, result in results.items()}, sys.stdout, indent=1)

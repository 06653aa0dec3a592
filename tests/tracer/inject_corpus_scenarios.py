"""The scenarios that drive the corpus of tests/tracer/test_inject_*.py, and its recorder on 3.12.

The corpus is the functions of ``inject_corpus_functions.py`` and ``inject_corpus_generators.py``:
this module lists those that are traced (TRACED) and the scenarios that call them (SCENARIOS).
The same files run on Python 3.11 (imported by the tests: their functions instrumented with
``tracer._core.inject``, hooks recording) and, this one as a script, on Python 3.12, where it
records what ``sys.monitoring`` reports for the same functions and scenarios and prints it as JSON
(tests/data/inject-events-3.12.json holds it): the tests compare the two sequences. The corpus
imports nothing from the tracer, so that a bare 3.12 runs it. (3.13 reports fewer events: it
closes a generator suspended outside any try without resuming it.)

Each event is ``[event, qualname, detail]``: for yield and return a summary of the value, for
throw and unwind the exception's type and args.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import warnings
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script (by Python 3.12): the corpus is tests.tracer's
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.tracer import inject_corpus_functions, inject_corpus_generators
from tests.tracer.inject_corpus_functions import (
    Methods,
    Sub,
    caller_name,
    caught,
    closure,
    early,
    escapes,
    fact,
    finally_reraises,
    finally_return,
    finally_swallows,
    is_even,
    is_odd,
    loops,
    make_closure,
    many_jumps,
    matches,
    passes_through,
    plain,
    square,
    warns,
    with_statement,
)
from tests.tracer.inject_corpus_generators import (
    FINALLY_RAN,
    AsyncManager,
    agen,
    asyncio_main,
    co_async_for_with,
    co_awaits,
    co_calls_raiser,
    co_catches,
    co_leaf,
    co_raises,
    co_sleeps_forever,
    gen_catches_and_returns,
    gen_delegates,
    gen_raises,
    gen_simple,
    gen_stop_iteration,
    gen_try,
    gen_with,
)

# The files whose frames an outcome lists (and the tests' settrace sees): the corpus's and this.
CORPUS_FILES = frozenset(
    {__file__, inject_corpus_functions.__file__, inject_corpus_generators.__file__}
)

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
        if tb.tb_frame.f_code.co_filename in CORPUS_FILES:
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

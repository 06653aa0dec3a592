"""What the interpreter alone adds to the real program's traced calls when it tells a tool of
them: the floor under any tool so told, before the tool records or sends anything.

The real program's passes (``benchmarks.real_program``) run in one process, alternately bare and
with every function and method ``tracer run --include 'sqlparse.*'`` instruments (sqlparse's, found
in its modules and classes; not dunders or lambdas, as the tracer leaves them out; generator
expressions are not in a module's or a class's namespace) calling hooks that do nothing: on Python
3.12+ ``sys.monitoring``'s ``PY_START``, ``PY_RESUME``, ``PY_YIELD`` and ``PY_RETURN`` enabled on
their code objects, on 3.11 the same six hooks the tracer injects into their code
(``tracer._core.inject``). Each hook returns None and does nothing, and is called the way the
tracer's own handlers are: ``_speedups.nothing`` on 3.11 (a builtin function, as the injected
``monitor_*``), ``_speedups.hook_nothing`` on 3.12+ (an object whose vectorcall is the function,
as the ``hook_*`` ``sys.monitoring`` calls), so the floor is the call itself, not a callback's
own work (an earlier version used ``slice`` for
the three-argument events, which builds an object each time: that tripled the 3.12 floor). The
figure is the instrumented pass minus the bare pass, in this thread's CPU time (medians of
``rounds`` each), over the calls that start a pass: what telling a tool adds to each traced
call, its generators' steps included. The real case reports it beside VizTracer's cost per entry.

``python -m benchmarks.real_floor`` prints it for 12 statements.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from statistics import median
from typing import Any

import sqlparse

from benchmarks.real_program import format_once, script
from tracer._core import accel

TOOL = 5  # a free tool id, not one the tracer takes


def traced_functions() -> list[types.FunctionType]:
    """sqlparse's functions and methods, but dunders and lambdas, each once."""
    for found in pkgutil.walk_packages(sqlparse.__path__, "sqlparse."):
        importlib.import_module(found.name)
    functions: dict[int, types.FunctionType] = {}
    seen: set[int] = set()

    def visit(namespace: Any) -> None:
        if id(namespace) in seen:
            return
        seen.add(id(namespace))
        for attribute in vars(namespace).values():
            value = attribute
            if isinstance(value, staticmethod | classmethod):
                value = value.__func__
            candidates = [value]
            if isinstance(value, property):
                candidates = [value.fget, value.fset, value.fdel]
            for function in candidates:
                if isinstance(function, types.FunctionType) and _traced(function):
                    functions[id(function)] = function
            if isinstance(value, type) and value.__module__.startswith("sqlparse"):
                visit(value)

    for name, module in list(sys.modules.items()):
        if name == "sqlparse" or name.startswith("sqlparse."):
            visit(module)
    return list(functions.values())


def _traced(function: types.FunctionType) -> bool:
    name = function.__name__
    dunder = name.startswith("__") and name.endswith("__")
    return function.__module__.startswith("sqlparse") and not dunder and name != "<lambda>"


def _nothing() -> Callable[..., None]:
    """The no-op hook, of the kind the tracer's own handlers are on this Python."""
    speedups = accel.speedups
    if speedups is None:
        raise RuntimeError("the floor needs the C accelerator (its no-op hooks, _speedups)")
    nothing: Callable[..., None] = (
        speedups.nothing if sys.version_info < (3, 12) else speedups.hook_nothing
    )
    return nothing


class _Hooks:
    """``tracer._core.inject``'s six hooks, each ``start`` or ``other``."""

    def __init__(self, start: Callable[..., object], other: Callable[..., object]) -> None:
        self.start = start
        self.resume = self.throw = self.yield_ = self.return_ = self.unwind = other


@contextmanager
def _injected(functions: list[types.FunctionType]) -> Iterator[Callable[[bool, bool], None]]:
    """3.11: ``use(on, counting)`` swaps each function's code for one calling no-op hooks (or,
    counting, a start hook that counts), or back to its own."""
    from tracer._core.inject import instrument

    nothing = _nothing()
    own = {function: function.__code__ for function in functions}
    quiet = {f: instrument(code, f, _Hooks(nothing, nothing)) for f, code in own.items()}
    counting = {f: instrument(code, f, _Hooks(_count, nothing)) for f, code in own.items()}

    def use(on: bool, count: bool = False) -> None:
        codes = (counting if count else quiet) if on else own
        for function, code in codes.items():
            function.__code__ = code

    try:
        yield use
    finally:
        use(False)


@contextmanager
def _monitored(functions: list[types.FunctionType]) -> Iterator[Callable[[bool, bool], None]]:
    """3.12+: ``use(on, counting)`` enables the four events on each function's code, with
    no-op callbacks (or, counting, a ``PY_START`` callback that counts), or disables them."""
    monitoring: Any = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
    events = monitoring.events
    every = events.PY_START | events.PY_RESUME | events.PY_YIELD | events.PY_RETURN
    codes = {function.__code__ for function in functions}
    nothing = _nothing()

    def use(on: bool, count: bool = False) -> None:
        monitoring.register_callback(TOOL, events.PY_START, _count if count else nothing)
        for code in codes:
            monitoring.set_local_events(TOOL, code, every if on else 0)

    monitoring.use_tool_id(TOOL, "real_floor")
    try:
        for event in (events.PY_RESUME, events.PY_YIELD, events.PY_RETURN):
            monitoring.register_callback(TOOL, event, nothing)
        yield use
    finally:
        use(False)
        for event in (events.PY_START, events.PY_RESUME, events.PY_YIELD, events.PY_RETURN):
            monitoring.register_callback(TOOL, event, None)
        monitoring.free_tool_id(TOOL)


_starts = 0


def _count(*_: object) -> None:
    global _starts
    _starts += 1


def floor(statements: int, rounds: int) -> dict[str, float]:
    """ns a traced call that telling a tool of it adds (no-op hooks), and the calls a pass."""
    global _starts
    text = script(statements)
    functions = traced_functions()
    format_once(text)  # imports and caches warm
    instrumented = _injected if sys.version_info < (3, 12) else _monitored
    with instrumented(functions) as use:
        _starts = 0
        use(True, True)
        format_once(text)
        starts = _starts
        bare: list[float] = []
        told: list[float] = []
        for _ in range(rounds):
            for on, times in ((False, bare), (True, told)):
                use(on, False)
                started = time.thread_time_ns()
                format_once(text)
                times.append(time.thread_time_ns() - started)
    added = (median(told) - median(bare)) / starts
    return {"floor_ns": added, "starts": float(starts), "codes": float(len(functions))}


if __name__ == "__main__":
    found = floor(12, 11)
    how = "injected hooks" if sys.version_info < (3, 12) else "sys.monitoring's callbacks"
    print(
        f"Python {sys.version.split()[0]}: {found['codes']:.0f} functions, "
        f"{found['starts']:.0f} traced calls a pass; {how}, no-op, add "
        f"{found['floor_ns']:.1f} ns a traced call"
    )

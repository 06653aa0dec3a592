"""What ``sys.monitoring`` alone costs the real program's traced calls (Python 3.12+): the floor
under any tool it tells of each call, before the tool records or sends anything.

The real program's passes (``benchmarks.real_program``) run in one process, alternately bare and
with ``PY_START``, ``PY_RESUME``, ``PY_YIELD`` and ``PY_RETURN`` enabled on the code objects
``tracer run --include 'sqlparse.*'`` instruments (sqlparse's functions and methods, found in its
modules and classes; not dunders or lambdas, as the tracer leaves them out; generator expressions
are not in a module's or a class's namespace), with C callables that do next to nothing for
callbacks (``operator.is_``, ``slice``: ``benchmarks.monitoring_floor``). The figure is the
monitored pass minus the bare pass, in this thread's CPU time (medians of ``rounds`` each), over
the calls that start a pass: what the interpreter's dispatch adds to each traced call, its
generators' steps included. The real case reports it beside VizTracer's cost per entry.

``python -m benchmarks.real_floor`` prints it for 12 statements.
"""

from __future__ import annotations

import importlib
import operator
import pkgutil
import sys
import time
import types
from collections.abc import Callable
from statistics import median
from typing import Any

import sqlparse

from benchmarks.real_program import format_once, script

TOOL = 5  # a free tool id, not one the tracer takes


def traced_codes() -> set[types.CodeType]:
    """The code objects of sqlparse's functions and methods, but dunders and lambdas."""
    for found in pkgutil.walk_packages(sqlparse.__path__, "sqlparse."):
        importlib.import_module(found.name)
    codes: set[types.CodeType] = set()
    seen: set[int] = set()

    def visit(namespace: Any) -> None:
        if id(namespace) in seen:
            return
        seen.add(id(namespace))
        for attribute in vars(namespace).values():
            value = attribute
            if isinstance(value, staticmethod | classmethod):
                value = value.__func__
            functions = [value]
            if isinstance(value, property):
                functions = [value.fget, value.fset, value.fdel]
            for function in functions:
                if isinstance(function, types.FunctionType) and _traced(function):
                    codes.add(function.__code__)
            if isinstance(value, type) and value.__module__.startswith("sqlparse"):
                visit(value)

    for name, module in list(sys.modules.items()):
        if name == "sqlparse" or name.startswith("sqlparse."):
            visit(module)
    return codes


def _traced(function: types.FunctionType) -> bool:
    name = function.__name__
    dunder = name.startswith("__") and name.endswith("__")
    return function.__module__.startswith("sqlparse") and not dunder and name != "<lambda>"


def floor(statements: int, rounds: int) -> dict[str, float]:
    """ns a traced call that ``sys.monitoring`` adds with no-op callbacks, and the calls."""
    monitoring: Any = getattr(sys, "monitoring", None)
    if monitoring is None:
        raise RuntimeError("sys.monitoring is Python 3.12+")
    events = monitoring.events
    text = script(statements)
    codes = traced_codes()
    format_once(text)  # imports and caches warm
    starts = 0

    def count(code: types.CodeType, offset: int) -> None:
        nonlocal starts
        starts += 1

    def enable(mask: int) -> None:
        for code in codes:
            monitoring.set_local_events(TOOL, code, mask)

    monitoring.use_tool_id(TOOL, "real_floor")
    try:
        monitoring.register_callback(TOOL, events.PY_START, count)
        enable(events.PY_START)
        format_once(text)
        callbacks: list[tuple[int, Callable[..., object]]] = [
            (events.PY_START, operator.is_),
            (events.PY_RESUME, operator.is_),
            (events.PY_YIELD, slice),
            (events.PY_RETURN, slice),
        ]
        for event, callback in callbacks:
            monitoring.register_callback(TOOL, event, callback)
        every = events.PY_START | events.PY_RESUME | events.PY_YIELD | events.PY_RETURN
        bare: list[float] = []
        monitored: list[float] = []
        for _ in range(rounds):
            for mask, times in ((0, bare), (every, monitored)):
                enable(mask)
                started = time.thread_time_ns()
                format_once(text)
                times.append(time.thread_time_ns() - started)
    finally:
        enable(0)
        for event in (events.PY_START, events.PY_RESUME, events.PY_YIELD, events.PY_RETURN):
            monitoring.register_callback(TOOL, event, None)
        monitoring.free_tool_id(TOOL)
    added = (median(monitored) - median(bare)) / starts
    return {"floor_ns": added, "starts": float(starts), "codes": float(len(codes))}


if __name__ == "__main__":
    found = floor(12, 11)
    print(
        f"Python {sys.version.split()[0]}: {found['codes']:.0f} code objects, "
        f"{found['starts']:.0f} traced calls a pass; sys.monitoring with no-op callbacks adds "
        f"{found['floor_ns']:.1f} ns a traced call"
    )

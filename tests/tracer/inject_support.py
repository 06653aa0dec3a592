"""What the tests of tracer._core.inject (``test_inject_*.py``) share: the hooks that record an
instrumented corpus function's events as the corpus's 3.12 recorder does, a traced entry's
function, the names of the corpus's scenarios and the events 3.12's sys.monitoring reported for
each (EXPECTED)."""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.tracer import inject_corpus_scenarios as corpus
from tracer._core.inject import instrument


class Recorder:
    """Hooks that append ``[event, qualname, detail]`` as the corpus's 3.12 recorder does."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def start(self, key: types.CodeType, offset: int) -> None:
        self.events.append(["start", key.co_qualname])

    def resume(self, key: types.CodeType, offset: int) -> None:
        self.events.append(["resume", key.co_qualname])

    def throw(self, key: types.CodeType, offset: int, exc: BaseException) -> None:
        self.events.append(["throw", key.co_qualname, corpus.summary(exc)])

    def yield_(self, key: types.CodeType, offset: int, value: object) -> None:
        self.events.append(["yield", key.co_qualname, corpus.summary(value)])

    def return_(self, key: types.CodeType, offset: int, value: object) -> None:
        self.events.append(["return", key.co_qualname, corpus.summary(value)])

    def unwind(self, key: types.CodeType, offset: int, exc: BaseException) -> None:
        self.events.append(["unwind", key.co_qualname, corpus.summary(exc)])


def _function(fn: Callable[..., Any]) -> types.FunctionType:
    function = getattr(fn, "__func__", fn)
    assert isinstance(function, types.FunctionType)
    return function


def instrument_corpus(hooks: Recorder) -> tuple[list[types.FunctionType], list[types.CodeType]]:
    """Every corpus function instrumented in place (keyed by its original code): the functions
    and their original code, which the caller gives back."""
    functions = [_function(fn) for fn in corpus.TRACED]
    originals = [f.__code__ for f in functions]
    for f, code in zip(functions, originals, strict=True):
        f.__code__ = instrument(code, code, hooks)
    return functions, originals


SCENARIOS = list(corpus.SCENARIOS)

# Recorded on CPython 3.12.1 with sys.monitoring: what `python3.12
# tests/tracer/inject_corpus_scenarios.py` prints as JSON (the file lays it out an event a line).
EXPECTED: dict[str, list[list[Any]]] = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "inject-events-3.12.json").read_text()
)

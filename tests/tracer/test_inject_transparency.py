"""tracer._core.inject (CPython 3.11): what debuggers, tracebacks and introspection see of an
instrumented corpus function is what they saw of the original: settrace's call, line, return and
exception events (as pdb and coverage get them), the very same function object (inspect, pickle,
its source), references taken before, the caller's frame and a warning's attribution, and the
tracebacks' text to the carets."""

from __future__ import annotations

import functools
import inspect
import pickle
import sys
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

if sys.version_info[:2] != (3, 11):
    pytest.skip(
        "code instrumentation is the 3.11 path (3.12+: sys.monitoring)", allow_module_level=True
    )

from tests.tracer import inject_corpus_scenarios as corpus
from tests.tracer.inject_support import EXPECTED, SCENARIOS, Recorder, _function, instrument_corpus
from tracer._core.inject import is_instrumented, uninstrument


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """Every corpus function instrumented (keyed by its original code), restored after."""
    hooks = Recorder()
    functions, originals = instrument_corpus(hooks)
    try:
        yield hooks
    finally:
        for f, code in zip(functions, originals, strict=True):
            f.__code__ = uninstrument(f.__code__)
            assert f.__code__ is code


_HELPERS = {"summary", "describe", "<listcomp>"}


def _trace_events(scenario: Callable[[], Any]) -> list[Any]:
    """What sys.settrace sees of the corpus's frames (as pdb and coverage do): call, line,
    return and exception events with their line numbers."""
    seen: list[Any] = []

    def tracer(frame: types.FrameType, event: str, arg: Any) -> Any:
        # (summary and describe: the Recorder's hooks call them, they are not under test)
        if frame.f_code.co_filename not in corpus.CORPUS_FILES or frame.f_code.co_name in _HELPERS:
            return None
        seen.append([event, frame.f_code.co_name, frame.f_lineno])
        return tracer

    sys.settrace(tracer)
    try:
        scenario()
    finally:
        sys.settrace(None)
    return seen


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_line_tracing_is_unchanged(recorder: Recorder, scenario: str) -> None:
    run = corpus.SCENARIOS[scenario]
    instrumented = _trace_events(run)
    functions = [_function(fn) for fn in corpus.TRACED]
    codes = [f.__code__ for f in functions]
    for f in functions:
        f.__code__ = uninstrument(f.__code__)
    try:
        bare = _trace_events(run)
    finally:
        for f, code in zip(functions, codes, strict=True):
            f.__code__ = code
    assert instrumented == bare
    assert recorder.events == EXPECTED[scenario]  # the hooks ran as well under the tracer


def test_the_function_stays_the_same_object(recorder: Recorder) -> None:
    fn = corpus.gen_delegates
    assert is_instrumented(fn.__code__)
    assert type(fn) is types.FunctionType
    assert inspect.isfunction(fn)
    assert inspect.isgeneratorfunction(fn)
    assert inspect.iscoroutinefunction(corpus.co_awaits)
    assert inspect.isasyncgenfunction(corpus.agen)
    assert pickle.loads(pickle.dumps(corpus.plain)) is corpus.plain
    assert pickle.loads(pickle.dumps(corpus.Methods.static)) is corpus.Methods.static
    assert str(inspect.signature(corpus.plain)) == "(a, b=2, *args, k=3, **kw)"
    assert inspect.getsourcelines(corpus.plain)[1] == corpus.plain.__code__.co_firstlineno
    assert "return a + b + k" in inspect.getsource(corpus.plain)


def test_references_taken_before_are_traced_too(recorder: Recorder) -> None:
    # The fixture instrumented corpus.fact in place: a partial made of it before is traced.
    assert functools.partial(corpus.fact, 2)() == 2
    assert recorder.events == [
        ["start", "fact"], ["start", "fact"], ["return", "fact", 1], ["return", "fact", 2]
    ]  # fmt: skip


def test_frames_are_the_callers(recorder: Recorder) -> None:
    assert corpus.caller_name() == "test_frames_are_the_callers"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        corpus.warns("w")
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]
    assert [e[:2] for e in recorder.events] == [
        ["start", "caller_name"], ["return", "caller_name"], ["start", "warns"],
        ["return", "warns"],
    ]  # fmt: skip


def test_tracebacks_are_unchanged(recorder: Recorder) -> None:
    """The same text, carets included: no entry for the unwind handler, the same lines."""

    def text(fn: Callable[[], Any]) -> str:
        try:
            fn()
        except BaseException as e:
            return "".join(traceback.format_exception(e))
        raise AssertionError("did not raise")

    def gen_thrown() -> None:
        gen = corpus.gen_try()
        next(gen)
        gen.throw(ValueError("x"))

    def delegated() -> None:
        gen = corpus.gen_delegates()
        next(gen)
        gen.throw(ValueError("x"))

    cases = [
        lambda: corpus.passes_through(1), lambda: corpus.finally_reraises(0),
        lambda: corpus.with_statement(False), lambda: list(corpus.gen_stop_iteration()),
        gen_thrown, delegated, lambda: corpus.Methods.static(None),
    ]  # fmt: skip
    instrumented = [text(case) for case in cases]
    assert [e[:2] for e in recorder.events[-2:]] == [
        ["start", "Methods.static"], ["unwind", "Methods.static"]
    ]  # fmt: skip
    functions = [_function(fn) for fn in corpus.TRACED]
    codes = [f.__code__ for f in functions]
    for f in functions:
        f.__code__ = uninstrument(f.__code__)
    try:
        bare = [text(case) for case in cases]
    finally:
        for f, code in zip(functions, codes, strict=True):
            f.__code__ = code
    assert instrumented == bare

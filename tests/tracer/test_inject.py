"""tracer._core.inject (CPython 3.11): an instrumented function behaves as it did, and its hooks
are called in the sequence 3.12's sys.monitoring reports for the same code.

The corpus and its scenarios are in ``inject_corpus.py``; EXPECTED below is what
``python3.12 tests/tracer/inject_corpus.py`` printed (sys.monitoring's events for each
scenario). ``test_events_match_live_python312`` runs that again when a Python 3.12 is found
(``INVOSEQ_PYTHON312``, ``python3.12`` on PATH or pyenv's 3.12.*) and compares it with ours.
"""

from __future__ import annotations

import dis
import functools
import glob
import inspect
import json
import os
import pickle
import shutil
import subprocess
import sys
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if sys.version_info[:2] != (3, 11):
    pytest.skip(
        "code instrumentation is the 3.11 path (3.12+: sys.monitoring)", allow_module_level=True
    )

from tests.tracer import inject_corpus as corpus
from tracer._core import _bytecode311 as bytecode
from tracer._core.inject import instrument, is_instrumented, uninstrument

CORPUS_FILE = corpus.__file__


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


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """Every corpus function instrumented (keyed by its original code), restored after."""
    hooks = Recorder()
    functions = [_function(fn) for fn in corpus.TRACED]
    originals = [f.__code__ for f in functions]
    for f, code in zip(functions, originals, strict=True):
        f.__code__ = instrument(code, code, hooks)
    try:
        yield hooks
    finally:
        for f, code in zip(functions, originals, strict=True):
            f.__code__ = uninstrument(f.__code__)
            assert f.__code__ is code


@pytest.fixture(scope="module")
def bare_results() -> dict[str, Any]:
    return corpus.run_scenarios([])


@pytest.fixture(scope="module")
def instrumented_results() -> dict[str, Any]:
    hooks = Recorder()
    functions = [_function(fn) for fn in corpus.TRACED]
    originals = [f.__code__ for f in functions]
    for f, code in zip(functions, originals, strict=True):
        f.__code__ = instrument(code, code, hooks)
    try:
        return corpus.run_scenarios(hooks.events)
    finally:
        for f, code in zip(functions, originals, strict=True):
            f.__code__ = code


SCENARIOS = list(corpus.SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_events_are_those_of_python312(instrumented_results: dict[str, Any], scenario: str) -> None:
    assert instrumented_results[scenario]["events"] == EXPECTED[scenario]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_behaviour_is_unchanged(
    bare_results: dict[str, Any], instrumented_results: dict[str, Any], scenario: str
) -> None:
    """Results, exceptions, the traceback's frames and lines, ``sys._getframe(1)``, the
    warning's attribution, the finally blocks that ran."""
    assert instrumented_results[scenario]["outcome"] == bare_results[scenario]["outcome"]


def _python312() -> str | None:
    candidates = [os.environ.get("INVOSEQ_PYTHON312"), shutil.which("python3.12")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python")))
    for exe in candidates:
        if not exe:
            continue
        probe = subprocess.run(
            [exe, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return exe
    return None


def test_events_match_live_python312(instrumented_results: dict[str, Any]) -> None:
    exe = _python312()
    if exe is None:
        pytest.skip("no Python 3.12 here: EXPECTED (recorded on 3.12) stands in for it")
    recorded = subprocess.run(
        [exe, CORPUS_FILE], capture_output=True, text=True, check=True, timeout=60
    )
    live = json.loads(recorded.stdout)
    assert live == EXPECTED, "3.12 reports other events than EXPECTED holds: re-record it"
    ours = {name: result["events"] for name, result in instrumented_results.items()}
    assert ours == live


_HELPERS = {"summary", "describe", "<listcomp>"}


def _trace_events(scenario: Callable[[], Any]) -> list[Any]:
    """What sys.settrace sees of the corpus's frames (as pdb and coverage do): call, line,
    return and exception events with their line numbers."""
    seen: list[Any] = []

    def tracer(frame: types.FrameType, event: str, arg: Any) -> Any:
        # (summary and describe: the Recorder's hooks call them, they are not under test)
        if frame.f_code.co_filename != CORPUS_FILE or frame.f_code.co_name in _HELPERS:
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


def test_code_attributes_are_kept() -> None:
    for fn in corpus.TRACED:
        code = _function(fn).__code__
        new = instrument(code, code, Recorder())
        for name in (
            "co_name", "co_qualname", "co_filename", "co_firstlineno", "co_argcount",
            "co_posonlyargcount", "co_kwonlyargcount", "co_varnames", "co_freevars",
            "co_cellvars", "co_flags", "co_nlocals", "co_names",
        ):  # fmt: skip
            assert getattr(new, name) == getattr(code, name), name
        assert new.co_consts[: len(code.co_consts)] == code.co_consts
        assert uninstrument(new) is code
        assert uninstrument(code) is code
        # Every original instruction is there, in order, with its position (line and columns);
        # the inserted ones bring no line of their own.
        assert _in_order(bytecode.decode(code), bytecode.decode(new))
        assert {line for *_, line in new.co_lines()} - {None} == {
            line for *_, line in code.co_lines()
        } - {None}


def _in_order(originals: list[bytecode.Instr], instrs: list[bytecode.Instr]) -> bool:
    def same(a: bytecode.Instr, b: bytecode.Instr) -> bool:
        return a.op == b.op and a.pos == b.pos and (a.target is not None or a.arg == b.arg)

    remaining = iter(instrs)
    return all(any(same(original, ins) for ins in remaining) for original in originals)


def test_instrumenting_twice_is_refused() -> None:
    code = corpus.plain.__code__
    new = instrument(code, code, Recorder())
    with pytest.raises(ValueError, match="instrumented already"):
        instrument(new, code, Recorder())


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


def test_a_raising_hook_raises_from_the_call() -> None:
    class Raising(Recorder):
        def start(self, key: types.CodeType, offset: int) -> None:
            raise LookupError("from the hook")

    fn = corpus.square
    code = fn.__code__
    fn.__code__ = instrument(code, code, Raising())
    try:
        with pytest.raises(LookupError, match="from the hook"):
            fn(2)
    finally:
        fn.__code__ = code


def test_extended_args_and_long_jumps() -> None:
    """Over 256 constants (so the hooks' LOAD_CONSTs take EXTENDED_ARG, and the loop's decoy
    SEND jumps over them) and jumps over more than 256 code units."""
    source = (
        "def big(n):\n"
        "    total = 0\n"
        "    for i in range(n):\n"
        "        if i % 3:\n"
        + "".join(f"            total += i * {n}.25\n" for n in range(300))
        + "        else:\n            total -= 1\n"
        "        x = yield total\n"
        "        yield from range(2)\n"
        "    return total\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "<big>", "exec"), namespace)
    big = namespace["big"]
    bare = list(big(4))
    hooks = Recorder()
    code = big.__code__
    big.__code__ = new = instrument(code, code, hooks)
    assert len(new.co_consts) > 300
    assert any(dis.opname[b] == "EXTENDED_ARG" for b in new.co_code[::2])
    gen = big(4)
    assert list(gen) == bare
    assert [e[0] for e in hooks.events].count("yield") == len(bare)
    assert hooks.events[-1][0] == "return"
    gen = big(4)
    next(gen)
    next(gen)
    with pytest.raises(KeyError):
        gen.throw(KeyError("k"))
    assert [e[0] for e in hooks.events[-2:]] == ["throw", "unwind"]


def test_reassembling_unchanged_stdlib_code_is_exact() -> None:
    """The assembler's round trip: decode and assemble every code object of a few stdlib
    modules: the same bytes, positions, exception table and line ranges."""
    import asyncio.base_events
    import json.decoder
    import typing

    def codes(code: types.CodeType) -> Iterator[types.CodeType]:
        yield code
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                yield from codes(const)

    count = 0
    for module in (asyncio.base_events, json.decoder, typing, inspect):
        top = compile(Path(module.__file__ or "").read_text(), module.__file__ or "", "exec")
        for code in codes(top):
            count += 1
            again = bytecode.assemble(
                code, bytecode.decode(code), code.co_consts, code.co_stacksize
            )
            assert again.co_code == code.co_code
            assert list(again.co_positions()) == list(code.co_positions())
            assert list(again.co_lines()) == list(code.co_lines())
            assert again.co_exceptiontable == code.co_exceptiontable
            # and instrumenting it works
            instrument(code, code, Recorder())
    assert count > 500


# Recorded on CPython 3.12.1 with sys.monitoring: `python3.12 tests/tracer/inject_corpus.py`.
EXPECTED: dict[str, list[list[Any]]] = {
    "plain": [
        ["start", "plain"],
        ["return", "plain", 6],
        ["start", "plain"],
        ["return", "plain", 11],
    ],
    "early": [
        ["start", "early"],
        ["return", "early", "pos"],
        ["start", "early"],
        ["return", "early", "neg"],
        ["start", "early"],
        ["return", "early", "zero"],
    ],
    "caught": [
        ["start", "caught"],
        ["return", "caught", ["caught", "k"]],
    ],
    "escapes": [
        ["start", "escapes"],
        ["unwind", "escapes", "ValueError[2]"],
    ],
    "passes_through": [
        ["start", "passes_through"],
        ["start", "escapes"],
        ["unwind", "escapes", "ValueError[2]"],
        ["unwind", "passes_through", "ValueError[2]"],
    ],
    "finally_return": [
        ["start", "finally_return"],
        ["return", "finally_return", "finally"],
    ],
    "finally_swallows": [
        ["start", "finally_swallows"],
        ["return", "finally_swallows", "swallowed"],
    ],
    "finally_reraises": [
        ["start", "finally_reraises"],
        ["return", "finally_reraises", 1],
        ["start", "finally_reraises"],
        ["unwind", "finally_reraises", "ZeroDivisionError['integer division or modulo by zero']"],
    ],
    "with_statement": [
        ["start", "with_statement"],
        ["return", "with_statement", "after"],
        ["start", "with_statement"],
        ["unwind", "with_statement", "KeyError[False]"],
    ],
    "loops": [
        ["start", "loops"],
        ["return", "loops", [12, 2]],
        ["start", "loops"],
        ["return", "loops", [-1, 2]],
    ],
    "make_closure": [
        ["start", "make_closure"],
        ["return", "make_closure", 1],
    ],
    "closure": [
        ["start", "_closure_factory.<locals>.closure"],
        ["return", "_closure_factory.<locals>.closure", 21],
        ["start", "_closure_factory.<locals>.closure"],
        ["return", "_closure_factory.<locals>.closure", 22],
    ],
    "recursion": [
        ["start", "fact"],
        ["start", "fact"],
        ["start", "fact"],
        ["start", "fact"],
        ["return", "fact", 1],
        ["return", "fact", 2],
        ["return", "fact", 6],
        ["return", "fact", 24],
        ["start", "is_even"],
        ["start", "is_odd"],
        ["start", "is_even"],
        ["start", "is_odd"],
        ["return", "is_odd", False],
        ["return", "is_even", False],
        ["return", "is_odd", False],
        ["return", "is_even", False],
    ],
    "lambda": [
        ["start", "<lambda>"],
        ["return", "<lambda>", 9],
    ],
    "methods": [
        ["start", "Methods.method"],
        ["return", "Methods.method", ["Methods", 1]],
        ["start", "Methods.klass"],
        ["return", "Methods.klass", ["Methods", 2]],
        ["start", "Methods.static"],
        ["return", "Methods.static", 4],
    ],
    "super": [
        ["start", "Sub.method"],
        ["start", "Methods.method"],
        ["return", "Methods.method", ["Sub", 1]],
        ["return", "Sub.method", ["sub", ["Sub", 1]]],
    ],
    "match": [
        ["start", "matches"],
        ["return", "matches", ["point", 3]],
        ["start", "matches"],
        ["return", "matches", ["list", 1, 1]],
        ["start", "matches"],
        ["return", "matches", "text"],
        ["start", "matches"],
        ["return", "matches", 3],
    ],
    "warning": [
        ["start", "warns"],
        ["return", "warns", "warned"],
    ],
    "caller_name": [
        ["start", "caller_name"],
        ["return", "caller_name", "_call"],
    ],
    "many_jumps": [
        ["start", "many_jumps"],
        ["return", "many_jumps", 4],
        ["start", "many_jumps"],
        ["return", "many_jumps", 89],
        ["start", "many_jumps"],
        ["return", "many_jumps", 3041],
        ["start", "many_jumps"],
        ["return", "many_jumps", 1],
        ["start", "many_jumps"],
        ["return", "many_jumps", 2668],
    ],
    "gen_exhausted": [
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", 1],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", 2],
        ["resume", "gen_simple"],
        ["return", "gen_simple", "done"],
    ],
    "gen_send": [
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", ["got", "a"]],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", 1],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", 2],
        ["resume", "gen_simple"],
        ["return", "gen_simple", "done"],
    ],
    "gen_throw_caught": [
        ["start", "gen_try"],
        ["yield", "gen_try", 1],
        ["throw", "gen_try", "KeyError['t']"],
        ["yield", "gen_try", "handled"],
        ["resume", "gen_try"],
        ["return", "gen_try", None],
    ],
    "gen_throw_uncaught": [
        ["start", "gen_try"],
        ["yield", "gen_try", 1],
        ["throw", "gen_try", "ValueError['t']"],
        ["unwind", "gen_try", "ValueError['t']"],
    ],
    "gen_close_in_try": [
        ["start", "gen_try"],
        ["yield", "gen_try", 1],
        ["throw", "gen_try", "GeneratorExit[]"],
        ["unwind", "gen_try", "GeneratorExit[]"],
    ],
    "gen_close_outside_try": [
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["throw", "gen_simple", "GeneratorExit[]"],
        ["unwind", "gen_simple", "GeneratorExit[]"],
    ],
    "gen_close_unstarted": [],
    "gen_throw_unstarted": [
        ["throw", "gen_simple", "KeyError['u']"],
        ["unwind", "gen_simple", "KeyError['u']"],
    ],
    "gen_close_exhausted": [
        ["start", "gen_raises"],
        ["yield", "gen_raises", 1],
        ["resume", "gen_raises"],
        ["unwind", "gen_raises", "ValueError['from gen']"],
    ],
    "gen_stop_iteration": [
        ["start", "gen_stop_iteration"],
        ["yield", "gen_stop_iteration", 1],
        ["resume", "gen_stop_iteration"],
        ["unwind", "gen_stop_iteration", "RuntimeError['generator raised StopIteration']"],
    ],
    "gen_abandoned": [
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["throw", "gen_simple", "GeneratorExit[]"],
        ["unwind", "gen_simple", "GeneratorExit[]"],
    ],
    "gen_delegates": [
        ["start", "gen_delegates"],
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["yield", "gen_delegates", 0],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", 1],
        ["yield", "gen_delegates", 1],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["return", "gen_simple", "done"],
        ["yield", "gen_delegates", "done"],
        ["resume", "gen_delegates"],
        ["start", "gen_catches_and_returns"],
        ["yield", "gen_catches_and_returns", "inner"],
        ["yield", "gen_delegates", "inner"],
        ["resume", "gen_delegates"],
        ["resume", "gen_catches_and_returns"],
        ["return", "gen_catches_and_returns", None],
        ["yield", "gen_delegates", None],
        ["resume", "gen_delegates"],
        ["yield", "gen_delegates", 7],
        ["resume", "gen_delegates"],
        ["yield", "gen_delegates", 8],
        ["resume", "gen_delegates"],
        ["return", "gen_delegates", "outer done"],
    ],
    "gen_delegates_send": [
        ["start", "gen_delegates"],
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["yield", "gen_delegates", 0],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", ["got", "s"]],
        ["yield", "gen_delegates", ["got", "s"]],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", 1],
        ["yield", "gen_delegates", 1],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["return", "gen_simple", "done"],
        ["yield", "gen_delegates", "done"],
        ["throw", "gen_delegates", "GeneratorExit[]"],
        ["unwind", "gen_delegates", "GeneratorExit[]"],
    ],
    "gen_delegated_throw_returns": [
        ["start", "gen_delegates"],
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["yield", "gen_delegates", 0],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", 1],
        ["yield", "gen_delegates", 1],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["return", "gen_simple", "done"],
        ["yield", "gen_delegates", "done"],
        ["resume", "gen_delegates"],
        ["start", "gen_catches_and_returns"],
        ["yield", "gen_catches_and_returns", "inner"],
        ["yield", "gen_delegates", "inner"],
        ["throw", "gen_catches_and_returns", "KeyError['d']"],
        ["return", "gen_catches_and_returns", "returned"],
        ["throw", "gen_delegates", "StopIteration['returned']"],
        ["yield", "gen_delegates", "returned"],
        ["resume", "gen_delegates"],
        ["yield", "gen_delegates", 7],
        ["throw", "gen_delegates", "GeneratorExit[]"],
        ["unwind", "gen_delegates", "GeneratorExit[]"],
    ],
    "gen_delegated_throw_raises": [
        ["start", "gen_delegates"],
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["yield", "gen_delegates", 0],
        ["throw", "gen_simple", "ValueError['d']"],
        ["unwind", "gen_simple", "ValueError['d']"],
        ["throw", "gen_delegates", "ValueError['d']"],
        ["unwind", "gen_delegates", "ValueError['d']"],
    ],
    "gen_delegated_throw_to_iterator": [
        ["start", "gen_delegates"],
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["yield", "gen_delegates", 0],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["yield", "gen_simple", 1],
        ["yield", "gen_delegates", 1],
        ["resume", "gen_delegates"],
        ["resume", "gen_simple"],
        ["return", "gen_simple", "done"],
        ["yield", "gen_delegates", "done"],
        ["resume", "gen_delegates"],
        ["start", "gen_catches_and_returns"],
        ["yield", "gen_catches_and_returns", "inner"],
        ["yield", "gen_delegates", "inner"],
        ["resume", "gen_delegates"],
        ["resume", "gen_catches_and_returns"],
        ["return", "gen_catches_and_returns", None],
        ["yield", "gen_delegates", None],
        ["resume", "gen_delegates"],
        ["yield", "gen_delegates", 7],
        ["throw", "gen_delegates", "ValueError['i']"],
        ["unwind", "gen_delegates", "ValueError['i']"],
    ],
    "gen_delegated_close": [
        ["start", "gen_delegates"],
        ["start", "gen_simple"],
        ["yield", "gen_simple", 0],
        ["yield", "gen_delegates", 0],
        ["throw", "gen_simple", "GeneratorExit[]"],
        ["unwind", "gen_simple", "GeneratorExit[]"],
        ["throw", "gen_delegates", "GeneratorExit[]"],
        ["unwind", "gen_delegates", "GeneratorExit[]"],
    ],
    "gen_with": [
        ["start", "gen_with"],
        ["yield", "gen_with", "in with"],
        ["resume", "gen_with"],
        ["yield", "gen_with", "after with"],
        ["resume", "gen_with"],
        ["return", "gen_with", None],
        ["start", "gen_with"],
        ["yield", "gen_with", "in with"],
        ["resume", "gen_with"],
        ["unwind", "gen_with", "KeyError['w']"],
    ],
    "gen_with_close": [
        ["start", "gen_with"],
        ["yield", "gen_with", "in with"],
        ["throw", "gen_with", "GeneratorExit[]"],
        ["unwind", "gen_with", "GeneratorExit[]"],
    ],
    "co_awaits": [
        ["start", "co_awaits"],
        ["start", "co_leaf"],
        ["return", "co_leaf", 4],
        ["yield", "co_awaits", "FutureLike"],
        ["resume", "co_awaits"],
        ["return", "co_awaits", [4, "r"]],
    ],
    "co_raises": [
        ["start", "co_raises"],
        ["yield", "co_raises", "FutureLike"],
        ["resume", "co_raises"],
        ["unwind", "co_raises", "KeyError['co']"],
    ],
    "co_thrown_caught": [
        ["start", "co_catches"],
        ["yield", "co_catches", "FutureLike"],
        ["throw", "co_catches", "ValueError['v']"],
        ["return", "co_catches", ["caught", ["v"]]],
    ],
    "co_thrown_uncaught": [
        ["start", "co_catches"],
        ["yield", "co_catches", "FutureLike"],
        ["throw", "co_catches", "KeyError['k']"],
        ["unwind", "co_catches", "KeyError['k']"],
    ],
    "co_exception_below": [
        ["start", "co_calls_raiser"],
        ["start", "co_raises"],
        ["yield", "co_raises", "FutureLike"],
        ["yield", "co_calls_raiser", "FutureLike"],
        ["resume", "co_calls_raiser"],
        ["resume", "co_raises"],
        ["unwind", "co_raises", "KeyError['co']"],
        ["return", "co_calls_raiser", "caught below"],
    ],
    "co_closed": [
        ["start", "co_awaits"],
        ["start", "co_leaf"],
        ["return", "co_leaf", 2],
        ["yield", "co_awaits", "FutureLike"],
        ["throw", "co_awaits", "GeneratorExit[]"],
        ["unwind", "co_awaits", "GeneratorExit[]"],
    ],
    "co_async_for_with": [
        ["start", "co_async_for_with"],
        ["start", "AsyncManager.__aenter__"],
        ["return", "AsyncManager.__aenter__", "AsyncManager"],
        ["start", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["yield", "co_async_for_with", "FutureLike"],
        ["resume", "co_async_for_with"],
        ["resume", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["return", "agen", None],
        ["start", "AsyncManager.__aexit__"],
        ["return", "AsyncManager.__aexit__", False],
        ["return", "co_async_for_with", [0, 1, 2]],
    ],
    "co_async_for_thrown": [
        ["start", "co_async_for_with"],
        ["start", "AsyncManager.__aenter__"],
        ["return", "AsyncManager.__aenter__", "AsyncManager"],
        ["start", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["yield", "co_async_for_with", "FutureLike"],
        ["throw", "co_async_for_with", "KeyError['in for']"],
        ["throw", "agen", "GeneratorExit[]"],
        ["unwind", "agen", "GeneratorExit[]"],
        ["start", "AsyncManager.__aexit__"],
        ["return", "AsyncManager.__aexit__", False],
        ["unwind", "co_async_for_with", "KeyError['in for']"],
    ],
    "co_async_for_cancelled": [
        ["start", "co_async_for_with"],
        ["start", "AsyncManager.__aenter__"],
        ["return", "AsyncManager.__aenter__", "AsyncManager"],
        ["start", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["yield", "co_async_for_with", "FutureLike"],
        ["throw", "co_async_for_with", "GeneratorExit[]"],
        ["throw", "agen", "GeneratorExit[]"],
        ["unwind", "agen", "GeneratorExit[]"],
        ["start", "AsyncManager.__aexit__"],
        ["return", "AsyncManager.__aexit__", False],
        ["unwind", "co_async_for_with", "GeneratorExit[]"],
    ],
    "agen": [
        ["start", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["yield", "agen", "FutureLike"],
        ["resume", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["return", "agen", None],
    ],
    "agen_athrow_caught": [
        ["start", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["throw", "agen", "KeyError['a']"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["return", "agen", None],
    ],
    "agen_athrow_uncaught": [
        ["start", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["throw", "agen", "ValueError['a']"],
        ["unwind", "agen", "ValueError['a']"],
    ],
    "agen_aclose": [
        ["start", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["throw", "agen", "GeneratorExit[]"],
        ["unwind", "agen", "GeneratorExit[]"],
    ],
    "asyncio": [
        ["start", "asyncio_main"],
        ["yield", "asyncio_main", None],
        ["resume", "asyncio_main"],
        ["start", "co_leaf"],
        ["return", "co_leaf", 2],
        ["yield", "asyncio_main", None],
        ["start", "co_sleeps_forever"],
        ["yield", "co_sleeps_forever", "Future"],
        ["resume", "asyncio_main"],
        ["yield", "asyncio_main", "Task"],
        ["throw", "co_sleeps_forever", "CancelledError[]"],
        ["unwind", "co_sleeps_forever", "CancelledError[]"],
        ["throw", "asyncio_main", "CancelledError[]"],
        ["start", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["yield", "agen", "async_generator_wrapped_value"],
        ["resume", "agen"],
        ["return", "agen", None],
        ["return", "asyncio_main", [2, "cancelled", 0, 1]],
    ],
}


def test_instrumented_stdlib_modules_still_work() -> None:
    """Every function of json, textwrap, dataclasses, re's compiler and asyncio's pure-Python
    modules instrumented at once (and restored after): a program using them runs as before."""
    import asyncio.locks
    import asyncio.queues
    import asyncio.tasks
    import dataclasses
    import json
    import json.decoder
    import json.encoder
    import re._compiler
    import re._parser
    import textwrap

    counts: dict[str, int] = {}

    def counter(event: str) -> Callable[..., None]:
        def hook(*args: Any) -> None:
            counts[event] = counts.get(event, 0) + 1

        return hook

    hooks = types.SimpleNamespace(
        **{e: counter(e) for e in ("start", "resume", "throw", "yield_", "return_", "unwind")}
    )
    modules = [json, json.decoder, json.encoder, textwrap, dataclasses, re._parser, re._compiler]
    modules += [asyncio.tasks, asyncio.queues, asyncio.locks]
    done: list[tuple[types.FunctionType, types.CodeType]] = []

    def program() -> list[Any]:
        re.purge()

        @dataclasses.dataclass
        class Point:
            x: int
            y: int = 2

        async def worker(queue: asyncio.Queue[int | None]) -> int:
            total = 0
            while (item := await queue.get()) is not None:
                total += item
            return total

        async def main() -> list[Any]:
            queue: asyncio.Queue[int | None] = asyncio.Queue()
            workers = [asyncio.create_task(worker(queue)) for _ in range(3)]
            for n in range(20):
                await queue.put(n)
            for _ in workers:
                await queue.put(None)
            totals = await asyncio.gather(*workers)
            try:
                await asyncio.wait_for(asyncio.sleep(1), 0.01)
            except TimeoutError:
                totals.append("timed out")
            return totals

        return [
            json.loads(json.dumps({"a": [1, 2.5, None, "x"]}, indent=2)),
            textwrap.fill("hello world " * 10, 30),
            re.compile(r"(a|b)*c+[xyz]{2,3}(?P<n>\d+)").pattern,
            repr(Point(1)),
            sum(asyncio.run(main())[:3]),
        ]

    bare = program()
    try:
        for module in modules:
            for value in list(vars(module).values()):
                candidates = [value]
                if isinstance(value, type) and value.__module__ == module.__name__:
                    candidates = [getattr(v, "__func__", v) for v in vars(value).values()]
                for candidate in candidates:
                    fn = candidate.fget if isinstance(candidate, property) else candidate
                    if (
                        isinstance(fn, types.FunctionType)
                        and fn.__module__ == module.__name__
                        and not is_instrumented(fn.__code__)
                    ):
                        done.append((fn, fn.__code__))
                        fn.__code__ = instrument(fn.__code__, fn.__code__, hooks)
        assert len(done) > 200
        assert program() == bare
    finally:
        for fn, code in done:
            fn.__code__ = code
    assert counts["start"] > 200
    assert counts["yield_"] > 0
    assert counts["throw"] > 0  # wait_for's timeout cancels the sleep

"""tracer._core.inject (CPython 3.11): an instrumented code object keeps the original's attributes,
every original instruction in order with its position, and its lines, and ``uninstrument`` gives
the original back; instrumenting twice is refused, a hook that raises raises from the call, and
a function with over 256 constants and long jumps (EXTENDED_ARG) runs as before, its hooks
called."""

from __future__ import annotations

import dis
import sys
import types
from typing import Any

import pytest

if sys.version_info[:2] != (3, 11):
    pytest.skip(
        "code instrumentation is the 3.11 path (3.12+: sys.monitoring)", allow_module_level=True
    )

from tests.tracer import inject_corpus_scenarios as corpus
from tests.tracer.inject_support import Recorder, _function
from tracer._core import _bytecode311 as bytecode
from tracer._core.inject import instrument, uninstrument


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

"""Instrument a function's code object in place of wrapping the function (CPython 3.11):
``f.__code__ = instrument(f.__code__, key, hooks)`` calls the hooks where ``sys.monitoring`` (3.12+)
would fire its events, so the traced function stays the very same object and runs in its own frame;
``uninstrument`` gives the original code back.

More in docs/architecture.md, "tracer/_core/inject.py".
"""

from __future__ import annotations

import opcode
import sys
import types
from collections.abc import Callable
from typing import Protocol

from tracer._core._bytecode311 import (
    NO_FALLTHROUGH,
    NO_POS,
    Handler,
    Instr,
    Pos,
    assemble,
    decode,
    stack_depths,
)

__all__ = ["Hooks", "instrument", "is_instrumented", "uninstrument"]

_OP = opcode.opmap
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
_CO_ASYNC_GENERATOR = 0x200
_EXTRA_STACK = 7  # the most any inserted sequence pushes: the StopIteration landing block


class Hooks(Protocol):
    """The six callables, looked up once by ``instrument`` and embedded in the code."""

    @property
    def start(self) -> Callable[[object, int], object]: ...
    @property
    def resume(self) -> Callable[[object, int], object]: ...
    @property
    def throw(self) -> Callable[[object, int, BaseException], object]: ...
    @property
    def yield_(self) -> Callable[[object, int, object], object]: ...
    @property
    def return_(self) -> Callable[[object, int, object], object]: ...
    @property
    def unwind(self) -> Callable[[object, int, BaseException], object]: ...


def _runtime_error(kind: str) -> Callable[[BaseException], RuntimeError]:
    def runtime_error(stop: BaseException) -> RuntimeError:
        error = RuntimeError(f"{kind} raised {type(stop).__name__}")
        error.__cause__ = stop
        return error

    return runtime_error


_RUNTIME_ERRORS = {
    0x20: _runtime_error("generator"),
    0x80: _runtime_error("coroutine"),
    0x200: _runtime_error("async generator"),
}


class _Mark:
    """The last constant of an instrumented code object; the original code is the one before."""

    def __repr__(self) -> str:
        return "<invoseq instrumented>"


_MARK = _Mark()


def is_instrumented(code: types.CodeType) -> bool:
    return bool(code.co_consts) and code.co_consts[-1] is _MARK


def uninstrument(code: types.CodeType) -> types.CodeType:
    """The code object ``instrument`` was given (``code`` itself if it is not instrumented)."""
    if not is_instrumented(code):
        return code
    original = code.co_consts[-2]
    assert isinstance(original, types.CodeType)
    return original


class _Emitter:
    """Builds the hook-call sequences, adding the constants they load."""

    def __init__(self, code: types.CodeType, key: object) -> None:
        self.consts: list[object] = list(code.co_consts)
        self.key = self.const(key)
        self.zero = self.const(0)
        self._by_id: dict[int, int] = {}

    def const(self, value: object) -> int:
        self.consts.append(value)
        return len(self.consts) - 1

    def hook(self, fn: object) -> int:
        index = self._by_id.get(id(fn))
        if index is None:
            index = self._by_id[id(fn)] = self.const(fn)
        return index

    def call(
        self, fn: object, pos: Pos, handler: Handler | None, *, value: bool = False
    ) -> list[Instr]:
        """``fn(key, 0)``, or ``fn(key, 0, TOS)`` with ``value``, its result popped."""
        nargs = 3 if value else 2
        seq = [
            Instr(_OP["PUSH_NULL"]),
            Instr(_OP["LOAD_CONST"], self.hook(fn)),
            Instr(_OP["LOAD_CONST"], self.key),
            Instr(_OP["LOAD_CONST"], self.zero),
        ]
        if value:
            seq.append(Instr(_OP["COPY"], 5))
        seq += [Instr(_OP["PRECALL"], nargs), Instr(_OP["CALL"], nargs), Instr(_OP["POP_TOP"])]
        for ins in seq:
            ins.pos = pos
            ins.handler = handler
        return seq

    def call_with_made(self, fn: object, pos: Pos, make: object) -> list[Instr]:
        """``fn(key, 0, make(TOS))``, its result popped (``make``: an exception class, so the
        hook gets StopIteration(value), or the RuntimeError a StopIteration becomes)."""
        seq = [
            Instr(_OP["PUSH_NULL"]),
            Instr(_OP["LOAD_CONST"], self.hook(fn)),
            Instr(_OP["LOAD_CONST"], self.key),
            Instr(_OP["LOAD_CONST"], self.zero),
            Instr(_OP["PUSH_NULL"]),
            Instr(_OP["LOAD_CONST"], self.const(make)),
            Instr(_OP["COPY"], 7),
            Instr(_OP["PRECALL"], 1),
            Instr(_OP["CALL"], 1),
            Instr(_OP["PRECALL"], 3),
            Instr(_OP["CALL"], 3),
            Instr(_OP["POP_TOP"]),
        ]
        for ins in seq:
            ins.pos = pos
        return seq


def _is_delegation_loop(instrs: list[Instr], i: int) -> bool:
    """``SEND; YIELD_VALUE; RESUME n; JUMP_BACKWARD_NO_INTERRUPT`` (back to the SEND) at ``i``:
    the loop of a ``yield from`` or an await."""
    if i + 3 >= len(instrs):
        return False
    send, yield_value, resume, back = instrs[i : i + 4]
    return (
        send.op == _OP["SEND"]
        and yield_value.op == _OP["YIELD_VALUE"]
        and resume.op == _OP["RESUME"]
        and back.op == _OP["JUMP_BACKWARD_NO_INTERRUPT"]
        and back.target is send
    )


def instrument(code: types.CodeType, key: object, hooks: Hooks) -> types.CodeType:
    """A copy of ``code`` that calls ``hooks`` where 3.12's ``sys.monitoring`` fires PY_START,
    PY_RESUME, PY_THROW, PY_YIELD, PY_RETURN and PY_UNWIND (module docstring)."""
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError("instrument() is for CPython 3.11: 3.12+ has sys.monitoring")
    if is_instrumented(code):
        raise ValueError(f"{code.co_qualname} is instrumented already")
    return _Instrumenter(code, key, hooks).run()


class _Instrumenter:
    def __init__(self, code: types.CodeType, key: object, hooks: Hooks) -> None:
        self.code = code
        # Resolved once: a bound method read twice is two objects, and two constants.
        self.on_start, self.on_resume = hooks.start, hooks.resume
        self.on_yield, self.on_return = hooks.yield_, hooks.return_
        self.on_throw, self.on_unwind = hooks.throw, hooks.unwind
        self.emit = _Emitter(code, key)
        self.out: list[Instr] = []
        self.redirect: dict[Instr, Instr] = {}  # instruction -> the hook jumps to it run first
        self.throw_points: list[tuple[Instr, Handler | None, int]] = []  # handler, depth
        self.depths: dict[Instr, int] = {}
        self.no_catch_all: set[Instr] = set()  # inserted code outside the outermost handler
        self.created: Instr | None = None  # RETURN_GENERATOR

    def run(self) -> types.CodeType:
        original = decode(self.code)
        self.depths = stack_depths(original)
        self.body(original)
        emit = self.emit
        for ins in self.out:
            if ins.target is not None and ins.target in self.redirect:
                ins.target = self.redirect[ins.target]
        unwind_block = self.unwind_block()
        catch_all = Handler(unwind_block[0], 0, True)
        for ins in self.out:
            if ins.handler is None and ins not in self.no_catch_all:
                ins.handler = catch_all
        pads = self.throw_pads(catch_all)
        reraise = Instr(_OP["RERAISE"], 1)
        not_started: list[Instr] = []
        if self.created is not None:
            # close() (GeneratorExit) before the first next(): 3.12 does not run the frame at
            # all (3.11 does), so no hook; any other exception: throw, then (falling into the
            # unwind handler) unwind.
            not_started = [
                Instr(_OP["LOAD_CONST"], emit.const(GeneratorExit)),
                Instr(_OP["CHECK_EXC_MATCH"]),
                Instr(_OP["POP_JUMP_FORWARD_IF_TRUE"], target=reraise),
                *emit.call(self.on_throw, NO_POS, None, value=True),
            ]
            self.created.handler = Handler(not_started[0], 0, True)
        if self.out[-1].op not in NO_FALLTHROUGH:
            raise ValueError(f"{self.code.co_qualname}: code that runs off its end")
        instrs = [*self.out, *pads, *not_started, *unwind_block, reraise]
        consts = (*emit.consts, self.code, _MARK)
        return assemble(self.code, instrs, consts, max(self.code.co_stacksize, 2) + _EXTRA_STACK)

    def throw_pads(self, catch_all: Handler) -> list[Instr]:
        """Each throw point's own exception-table entry: to a pad that keeps the whole stack
        (so nothing is released, and no finalizer runs, before the hook, as in 3.12), calls
        the hook and re-raises with ``RERAISE 1`` into the handler the point had: that restores
        the frame's last instruction to the throw point and adds no traceback entry."""
        pads: dict[tuple[Handler, int], list[Instr]] = {}
        placed: list[Instr] = []
        for ins, handler, depth in self.throw_points:
            then = catch_all if handler is None else handler
            pad = pads.get((then, depth))
            if pad is None:
                pad = self.emit.call(self.on_throw, NO_POS, then, value=True)
                pad.append(Instr(_OP["RERAISE"], 1, handler=then))
                pads[then, depth] = pad
                placed += pad
            ins.handler = Handler(pad[0], depth, True)
        return placed

    def unwind_block(self) -> list[Instr]:
        """``unwind(key, 0, exc)`` and ``RERAISE 1``, at no position. A generator's (or
        coroutine's) StopIteration becomes RuntimeError as it leaves the frame: in C after the
        frame in 3.11, inside the frame in 3.12, whose PY_UNWIND sees the RuntimeError. So
        these get that RuntimeError (an equal one: 3.11 makes its own after the hook)."""
        emit = self.emit
        block = emit.call(self.on_unwind, NO_POS, None, value=True)
        block.append(Instr(_OP["RERAISE"], 1))
        kind = self.code.co_flags & _GENERATOR_FLAGS
        if not kind:
            return block
        stops: tuple[type[BaseException], ...] = (StopIteration,)
        if kind & _CO_ASYNC_GENERATOR:
            stops = (StopIteration, StopAsyncIteration)
        convert = emit.call_with_made(self.on_unwind, NO_POS, _RUNTIME_ERRORS[kind])
        convert.append(Instr(_OP["RERAISE"], 1))
        test = [
            Instr(_OP["LOAD_CONST"], emit.const(stops)),
            Instr(_OP["CHECK_EXC_MATCH"]),
            Instr(_OP["POP_JUMP_FORWARD_IF_TRUE"], target=convert[0]),
        ]
        return [*test, *block, *convert]

    def body(self, instrs: list[Instr]) -> None:
        out, emit = self.out, self.emit
        i = 0
        while i < len(instrs):
            ins = instrs[i]
            op = ins.op
            if op == _OP["RESUME"]:
                fn = self.on_start if ins.arg == 0 else self.on_resume
                out.append(ins)
                out += emit.call(fn, instrs[i + 1].pos, ins.handler)
            elif op in (_OP["RETURN_VALUE"], _OP["YIELD_VALUE"]):
                is_return = op == _OP["RETURN_VALUE"]
                seq = emit.call(
                    self.on_return if is_return else self.on_yield,
                    ins.pos,
                    ins.handler,
                    value=True,
                )
                self.redirect[ins] = seq[0]
                out += [*seq, ins]
                if not is_return:
                    self.throw_point(ins, 0)
            elif _is_delegation_loop(instrs, i):
                self.delegation_loop(*instrs[i : i + 4])
                i += 3
            else:
                out.append(ins)
                if op == _OP["RETURN_GENERATOR"]:
                    self.created = ins  # where a throw() before the first next() is raised
            i += 1

    def delegation_loop(self, send: Instr, yield_value: Instr, resume: Instr, back: Instr) -> None:
        """3.11's C code needs SEND right before YIELD_VALUE (gen.throw() reads the loop's end
        from its argument) and RESUME right after it (gi_yieldfrom): the hook runs after the real
        SEND, then a JUMP_FORWARD skips a SEND that never runs but gives gen.throw() the loop's
        end, which we make our StopIteration landing block, before the real end."""
        emit = self.emit
        assert send.target is not None
        landing = emit.call_with_made(self.on_throw, send.target.pos, StopIteration)
        self.no_catch_all.update(landing)
        decoy = Instr(send.op, target=landing[0], pos=yield_value.pos)
        decoy.handler = yield_value.handler
        skip = Instr(_OP["JUMP_FORWARD"], target=yield_value, pos=yield_value.pos)
        skip.handler = yield_value.handler
        self.out.append(send)
        self.out += emit.call(self.on_yield, yield_value.pos, yield_value.handler, value=True)
        self.out += [skip, decoy, yield_value, resume]
        self.out += emit.call(self.on_resume, back.pos, resume.handler)
        self.out += [back, *landing]
        self.throw_point(yield_value, 0)
        self.throw_point(back, -1)  # the delegate popped, the value sent pushed

    def throw_point(self, ins: Instr, below: int) -> None:
        """``ins`` is where 3.11 raises an exception thrown in. The stack is as before it
        (``below`` that), with the value sent (None) pushed on its value or its delegate."""
        depth = self.depths.get(ins)
        if depth is not None:  # (unreachable code has none)
            self.throw_points.append((ins, ins.handler, depth + below))

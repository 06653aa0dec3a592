"""Decode and re-assemble CPython 3.11 code objects, for the code instrumentation in ``inject``.

More in docs/architecture.md, "tracer/_core/_bytecode311.py".
"""

from __future__ import annotations

import dis
import opcode
import sys
import types
from dataclasses import dataclass

Pos = tuple[int | None, int | None, int | None, int | None]
NO_POS: Pos = (None, None, None, None)

_OP = opcode.opmap
EXTENDED_ARG = _OP["EXTENDED_ARG"]
CACHE = _OP.get("CACHE", 0)
# Inline cache entries that follow each opcode (3.11: LOAD_GLOBAL 5, CALL 4, ...).
_CACHES: list[int] = list(getattr(opcode, "_inline_cache_entries", [0] * 256))
# In 3.11 every jump is relative to the instruction after the jump (which has no cache entries).
_JUMPS = frozenset(dis.hasjrel)
_BACKWARD = frozenset(
    _OP[name]
    for name in (
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
        "POP_JUMP_BACKWARD_IF_FALSE",
        "POP_JUMP_BACKWARD_IF_TRUE",
        "POP_JUMP_BACKWARD_IF_NONE",
        "POP_JUMP_BACKWARD_IF_NOT_NONE",
    )
    if name in _OP
)


class Instr:
    """One instruction. ``arg`` is the full argument (EXTENDED_ARG prefixes folded in); for a
    jump it is recomputed from ``target`` on assembly. ``handler`` is where an exception raised
    by this instruction goes (None: out of the frame)."""

    __slots__ = ("arg", "handler", "op", "pos", "target")

    def __init__(
        self,
        op: int,
        arg: int = 0,
        *,
        target: Instr | None = None,
        pos: Pos = NO_POS,
        handler: Handler | None = None,
    ) -> None:
        self.op = op
        self.arg = arg
        self.target = target
        self.pos = pos
        self.handler = handler

    def __repr__(self) -> str:
        return f"<{opcode.opname[self.op]} {self.arg} line {self.pos[0]}>"


@dataclass(frozen=True, eq=True)
class Handler:
    """An exception-table target: the handler's first instruction, the stack depth kept under
    the exception and whether the raising instruction's offset is pushed too (``lasti``)."""

    target: Instr
    depth: int
    lasti: bool


def _read_varint_be(data: bytes, i: int) -> tuple[int, int]:
    """The exception table's varint: 6-bit chunks, most significant first, bit 6 continues."""
    b = data[i]
    value = b & 63
    i += 1
    while b & 64:
        b = data[i]
        i += 1
        value = (value << 6) | (b & 63)
    return value, i


def parse_exception_table(data: bytes) -> list[tuple[int, int, int, int, bool]]:
    """(start, end, target, depth, lasti) in code units, as the table lists them."""
    entries = []
    i = 0
    while i < len(data):
        start, i = _read_varint_be(data, i)
        length, i = _read_varint_be(data, i)
        target, i = _read_varint_be(data, i)
        depth_lasti, i = _read_varint_be(data, i)
        entries.append((start, start + length, target, depth_lasti >> 1, bool(depth_lasti & 1)))
    return entries


def decode(code: types.CodeType) -> list[Instr]:
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError("tracer._core._bytecode311 handles CPython 3.11 bytecode only")
    raw = code.co_code  # deoptimised: caches zeroed, adaptive opcodes undone
    units = len(raw) // 2
    positions: list[Pos] = list(code.co_positions())
    owner: list[Instr | None] = [None] * units
    instrs: list[Instr] = []
    jumps: list[tuple[Instr, int]] = []
    i = 0
    while i < units:
        first = i
        arg = 0
        while raw[2 * i] == EXTENDED_ARG:
            arg = (arg << 8) | raw[2 * i + 1]
            i += 1
        op = raw[2 * i]
        arg = (arg << 8) | raw[2 * i + 1]
        ins = Instr(op, arg, pos=positions[i])
        if op in _JUMPS:
            jumps.append((ins, i + 1 - arg if op in _BACKWARD else i + 1 + arg))
        i += 1 + _CACHES[op]
        owner[first:i] = [ins] * (i - first)
        instrs.append(ins)
    for ins, unit in jumps:
        ins.target = owner[unit]
    for start, end, target, depth, lasti in parse_exception_table(code.co_exceptiontable):
        handler_instr = owner[target]
        assert handler_instr is not None
        handler = Handler(handler_instr, depth, lasti)
        for unit in range(start, end):
            covered = owner[unit]
            assert covered is not None
            covered.handler = handler
    return instrs


#: Instructions after which control never falls through to the next one.
NO_FALLTHROUGH = frozenset(
    _OP[name]
    for name in (
        "RETURN_VALUE",
        "RERAISE",
        "RAISE_VARARGS",
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
    )
    if name in _OP
)


def stack_depths(instrs: list[Instr]) -> dict[Instr, int]:
    """The value stack's depth before each reachable instruction, as the compiler computes it
    (``dis.stack_effect``), but for RETURN_GENERATOR: +1, the value the first send() pushes."""
    index = {ins: n for n, ins in enumerate(instrs)}
    depths: dict[Instr, int] = {}
    work = [(0, 0)]
    while work:
        n, depth = work.pop()
        while n < len(instrs) and instrs[n] not in depths:
            ins = instrs[n]
            depths[ins] = depth
            arg = ins.arg if ins.op >= opcode.HAVE_ARGUMENT else None
            if ins.handler is not None:
                h = ins.handler
                work.append((index[h.target], h.depth + 1 + h.lasti))
            if ins.target is not None:
                work.append((index[ins.target], depth + dis.stack_effect(ins.op, arg, jump=True)))
            if ins.op in NO_FALLTHROUGH:
                break
            if ins.op == _OP.get("RETURN_GENERATOR"):
                depth += 1
            else:
                depth += dis.stack_effect(ins.op, arg, jump=False)
            n += 1
    return depths


def _ext(arg: int) -> int:
    """EXTENDED_ARG prefixes that ``arg`` needs."""
    return 0 if arg < 1 << 8 else 1 if arg < 1 << 16 else 2 if arg < 1 << 24 else 3


def _layout(instrs: list[Instr]) -> dict[Instr, int]:
    """Each instruction's first code unit, with every jump's argument set for that layout.

    Starts with every jump at its shortest and grows: distances only grow with sizes, so this
    reaches the fixed point (as CPython's own assembler does)."""
    for ins in instrs:
        if ins.target is not None:
            ins.arg = 0
    while True:
        offsets: dict[Instr, int] = {}
        unit = 0
        for ins in instrs:
            offsets[ins] = unit
            unit += _ext(ins.arg) + 1 + _CACHES[ins.op]
        grew = False
        for ins in instrs:
            if ins.target is None:
                continue
            after = offsets[ins] + _ext(ins.arg) + 1
            dest = offsets[ins.target]
            arg = after - dest if ins.op in _BACKWARD else dest - after
            if arg < 0:
                raise ValueError(f"{ins!r} cannot jump to {ins.target!r}: wrong direction")
            if _ext(arg) != _ext(ins.arg):
                grew = True
            ins.arg = arg
        if not grew:
            return offsets


def _varint_le(value: int, out: bytearray) -> None:
    """The location table's varint: 6-bit chunks, least significant first, bit 6 continues."""
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)


def _signed_varint_le(value: int, out: bytearray) -> None:
    _varint_le((-value << 1) | 1 if value < 0 else value << 1, out)


def encode_locations(runs: list[tuple[Pos, int]], firstlineno: int) -> bytes:
    """3.11's co_linetable for (position, code units) runs, one run an instruction as the
    compiler writes them (so that ``co_lines`` comes out as it went in): the "no location" form,
    the "no columns" form or the long form (never the short forms, which only save bytes)."""
    out = bytearray()
    line_now = firstlineno
    for pos, units in runs:
        line, end_line, col, end_col = pos
        left = units
        while left:
            size = min(left, 8)
            left -= size
            if line is None:
                out.append(0x80 | (15 << 3) | (size - 1))
            elif col is None and end_col is None and end_line in (None, line):
                out.append(0x80 | (13 << 3) | (size - 1))
                _signed_varint_le(line - line_now, out)
                line_now = line
            else:
                out.append(0x80 | (14 << 3) | (size - 1))
                _signed_varint_le(line - line_now, out)
                _varint_le((line if end_line is None else end_line) - line, out)
                _varint_le(0 if col is None else col + 1, out)
                _varint_le(0 if end_col is None else end_col + 1, out)
                line_now = line
    return bytes(out)


def _exception_item(value: int, first: bool, out: bytearray) -> None:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    for n, chunk in enumerate(chunks):
        out.append(chunk | (64 if n < len(chunks) - 1 else 0) | (128 if first and n == 0 else 0))


def encode_exception_table(entries: list[tuple[int, int, int, int, bool]]) -> bytes:
    out = bytearray()
    for start, end, target, depth, lasti in entries:
        _exception_item(start, True, out)
        _exception_item(end - start, False, out)
        _exception_item(target, False, out)
        _exception_item(depth << 1 | lasti, False, out)
    return bytes(out)


def assemble(
    code: types.CodeType, instrs: list[Instr], consts: tuple[object, ...], stacksize: int
) -> types.CodeType:
    """``code`` with ``instrs`` as its body; every other attribute of ``code`` is kept."""
    offsets = _layout(instrs)
    raw = bytearray()
    runs: list[tuple[Pos, int]] = []
    entries: list[tuple[int, int, int, int, bool]] = []
    for ins in instrs:
        start = len(raw) // 2
        ext = _ext(ins.arg)
        for shift in range(ext, 0, -1):
            raw += bytes((EXTENDED_ARG, (ins.arg >> (8 * shift)) & 0xFF))
        raw += bytes((ins.op, ins.arg & 0xFF))
        raw += bytes((CACHE, 0)) * _CACHES[ins.op]
        end = len(raw) // 2
        runs.append((ins.pos, end - start))
        h = ins.handler
        if h is None:
            continue
        target = offsets[h.target]
        last = entries[-1] if entries else None
        if last is not None and last[1] == start and last[2:] == (target, h.depth, h.lasti):
            entries[-1] = (last[0], end, target, h.depth, h.lasti)
        else:
            entries.append((start, end, target, h.depth, h.lasti))
    return code.replace(
        co_code=bytes(raw),
        co_consts=consts,
        co_stacksize=stacksize,
        co_linetable=encode_locations(runs, code.co_firstlineno),
        co_exceptiontable=encode_exception_table(entries),
    )

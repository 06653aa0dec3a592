"""tracer._core.inject (CPython 3.11) on the standard library's code: ``_bytecode311`` decodes and
re-assembles every code object of a few stdlib modules to the same bytes, positions, exception
table and lines (and each can be instrumented), and with every function of json, textwrap,
dataclasses, re's compiler and asyncio's pure-Python modules instrumented at once a program using
them runs as before, its hooks called."""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if sys.version_info[:2] != (3, 11):
    pytest.skip(
        "code instrumentation is the 3.11 path (3.12+: sys.monitoring)", allow_module_level=True
    )

from tests.tracer.inject_support import Recorder
from tracer._core import _bytecode311 as bytecode
from tracer._core.inject import instrument, is_instrumented


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

"""A traced function stays the program's function: the same object, of the same type, with the
same attributes, frames and pickling, and references taken before it was traced are traced too
(issue 32; docs/guide.md, "What tracing changes in your program")."""

from __future__ import annotations

import asyncio
import gc
import inspect
import pickle
import sys
import types
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from tracer import traced
from tracer._core import codes
from tracer.testing import capture

pytestmark = pytest.mark.skipif(
    not codes.available(),
    reason="code is not instrumented on this path yet: functions are wrapped",
)

MODULE = __name__


def plain(x: int, *, y: int = 1) -> int:
    """Plain."""
    return x + y


def generator(n: int) -> Iterator[int]:
    yield from range(n)


async def coroutine() -> int:
    await asyncio.sleep(0)
    return 1


async def async_generator() -> AsyncIterator[int]:
    yield 1


def caller_file_and_line() -> tuple[str, int]:
    frame = sys._getframe(1)
    return frame.f_code.co_filename, frame.f_lineno


def warns() -> None:
    warnings.warn("blame the caller", UserWarning, stacklevel=2)


def make_class(name: str) -> type:
    """A factory that names its class after its caller's module, as namedtuple and enum do."""
    return type(name, (), {"__module__": sys._getframe(1).f_globals["__name__"]})


class Shop:
    def method(self) -> str:
        return "m"

    @classmethod
    def klass(cls) -> str:
        return cls.__name__

    @staticmethod
    def static() -> str:
        return "s"


REGISTRY: dict[str, Callable[..., Any]] = {"plain": plain}  # captured before tracing


def default_argument(fn: Callable[..., int] = plain) -> int:
    return fn(1)


def names(trace: Any) -> list[str]:
    return [i.name.removeprefix(MODULE + ".") for i in trace.invocations()]


def code_attributes(fn: Callable[..., Any]) -> tuple[Any, ...]:
    """What a program reads of a function's code (3.11 runs an instrumented copy of it)."""
    code = fn.__code__
    return (
        code.co_name,
        code.co_qualname,
        code.co_filename,
        code.co_firstlineno,
        code.co_argcount,
        code.co_kwonlyargcount,
        code.co_posonlyargcount,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        code.co_flags,
    )


def test_a_traced_function_is_the_same_object_of_the_same_kind() -> None:
    before = (dict(vars(plain)), code_attributes(plain), inspect.signature(plain))
    for fn in (plain, generator, coroutine, async_generator):
        assert traced(fn) is fn
        assert type(fn) is types.FunctionType
    assert (dict(vars(plain)), code_attributes(plain), inspect.signature(plain)) == before
    assert inspect.getsource(plain).startswith("def plain(")
    assert inspect.isfunction(plain)
    assert inspect.isgeneratorfunction(generator)
    assert inspect.iscoroutinefunction(coroutine)
    assert inspect.isasyncgenfunction(async_generator)
    assert pickle.loads(pickle.dumps(plain)) is plain
    assert codes.is_traced(plain)


def test_methods_of_every_kind_stay_the_class_members_they_were() -> None:
    members = dict(vars(Shop))
    for name in ("method", "klass", "static"):
        assert traced(members[name]) is members[name]
    assert dict(vars(Shop)) == members
    with capture(sample_interval_ms=0) as trace:
        assert (Shop().method(), Shop.klass(), Shop.static()) == ("m", "Shop", "s")
        assert names(trace) == ["Shop.method", "Shop.klass", "Shop.static"]


def test_references_taken_before_tracing_are_traced() -> None:
    traced(plain)
    with capture(sample_interval_ms=0) as trace:
        assert REGISTRY["plain"](1) == 2
        assert default_argument() == 2
        assert names(trace) == ["plain", "plain"]


def test_the_frames_a_traced_function_sees_are_the_ones_it_would() -> None:
    for fn in (caller_file_and_line, warns, make_class):
        traced(fn)
    with capture(sample_interval_ms=0) as trace:
        line = sys._getframe().f_lineno + 1
        assert caller_file_and_line() == (__file__, line)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = sys._getframe().f_lineno + 1
            warns()
        assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]
        made = make_class("Made")
        assert made.__module__ == MODULE
        assert names(trace) == ["caller_file_and_line", "warns", "make_class"]


def test_a_traced_exception_keeps_its_traceback() -> None:
    def fails() -> None:
        raise KeyError("k")

    def traceback_of(fn: Callable[[], None]) -> list[tuple[str, str]]:
        try:
            fn()
        except KeyError as exc:
            tb = exc.__traceback__
        entries = []
        while tb is not None:
            entries.append((tb.tb_frame.f_code.co_name, tb.tb_frame.f_code.co_filename))
            tb = tb.tb_next
        return entries

    bare = traceback_of(fails)
    traced(fails)
    with capture(sample_interval_ms=0) as trace:
        assert traceback_of(fails) == bare
        assert [(i.status, i.error) for i in trace.invocations()] == [("error", "KeyError")]


def test_pluggy_finds_the_hook_specifications_of_a_traced_module() -> None:
    pluggy = pytest.importorskip("pluggy")
    spec = pluggy.HookspecMarker("shop")
    impl = pluggy.HookimplMarker("shop")
    specs = types.ModuleType("shop_specs")

    @spec
    def price(item: str) -> int:  # type: ignore[empty-body]
        """The item's price."""

    specs.price = price  # type: ignore[attr-defined]

    class Plugin:
        @impl
        def price(self, item: str) -> int:
            return len(item)

    traced(price)
    traced(Plugin.price)
    manager = pluggy.PluginManager("shop")
    manager.add_hookspecs(specs)
    manager.register(Plugin())
    with capture(sample_interval_ms=0) as trace:
        assert manager.hook.price(item="mug") == [3]
        assert names(trace) == [
            "test_pluggy_finds_the_hook_specifications_of_a_traced_module.<locals>.Plugin.price"
        ]


def test_steady_state_calls_leave_no_object_the_collector_tracks() -> None:
    """A leak test counting ``gc.get_objects()`` over rounds of calls sees the same count: a
    traced call leaves nothing behind (the tracer's threads may allocate now and then, a
    heartbeat, but nothing per call)."""
    if sys.modules["tracer._core.accel"].speedups is None:
        pytest.skip("the pure-Python path keeps each event as a tuple until it is sent")
    traced(plain)

    def count_after(calls: int) -> int:
        for _ in range(calls):
            plain(1)
        return len(gc.get_objects())

    # the sender waits an hour between drains: what it decodes would be counted
    with capture(sample_interval_ms=0, flush_interval_ms=3_600_000):
        for _ in range(5):  # the first calls intern, register, specialize and grow buffers
            count_after(100)
        before = count_after(0)
        after = count_after(20_000)
    assert after - before < 20, (before, after)


def test_a_program_measuring_its_allocations_does_not_count_the_tracers_buffers() -> None:
    """As more-itertools' memory tests do: tracemalloc over many traced calls."""
    if sys.modules["tracer._core.accel"].speedups is None:
        pytest.skip("the pure-Python path keeps each event as a tuple until it is sent")
    import tracemalloc

    traced(plain)
    with capture(sample_interval_ms=0, flush_interval_ms=3_600_000):
        plain(1)  # the thread's buffer exists
        tracemalloc.start()
        try:
            for _ in range(20_000):
                plain(1)
            retained = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    assert retained < 64 * 1024, retained

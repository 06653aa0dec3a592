"""@traced on every kind of callable: the events it records and what it keeps of the function."""

from __future__ import annotations

import asyncio
import inspect
import pickle
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tracer import traced
from tracer.testing import capture

MODULE = __name__


@traced
def add(x: int, y: int = 1) -> int:
    """Add two numbers."""
    return x + y


@traced
def outer(n: int) -> int:
    return add(n) + middle(n)


@traced
def middle(n: int) -> int:
    return add(n, 2)


@traced
def explode(kind: type[BaseException]) -> None:
    raise kind("boom")


@traced(name="custom-name")
def renamed() -> str:
    return "ok"


class Shop:
    @traced
    def method(self) -> str:
        return "m"

    @traced
    @classmethod
    def klass(cls) -> str:
        return cls.__name__

    @staticmethod
    @traced
    def static() -> str:
        return "s"


@traced
async def fetch(delay: float) -> str:
    await asyncio.sleep(delay)
    return await parse()


@traced
async def parse() -> str:
    return "parsed"


@traced
def numbers(n: int) -> Iterator[int]:
    for i in range(n):
        yield add(i)
    return


@traced
async def anumbers(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await asyncio.sleep(0)
        yield i


def shape(trace_invocations: list) -> list[tuple[str, str, str, str | None]]:
    """(name, parent name, status, error) per invocation, in start order."""
    by_iid = {i.iid: i for i in trace_invocations}
    return [
        (
            i.name.removeprefix(MODULE + "."),
            by_iid[i.parent].name.removeprefix(MODULE + ".") if i.parent else "",
            i.status,
            i.error,
        )
        for i in trace_invocations
    ]


def test_nested_calls_form_one_sequence_in_call_order() -> None:
    with capture() as trace:
        assert outer(1) == 5
        invocations = trace.invocations()
    assert shape(invocations) == [
        ("outer", "", "ok", None),
        ("add", "outer", "ok", None),
        ("middle", "outer", "ok", None),
        ("add", "middle", "ok", None),
    ]
    assert len({i.seq for i in invocations}) == 1
    assert all(i.start_ns <= i.end_ns for i in invocations if i.end_ns is not None)


def test_each_root_call_starts_a_new_sequence() -> None:
    with capture() as trace:
        add(1)
        add(2)
        invocations = trace.invocations()
    assert len(invocations) == 2
    assert invocations[0].seq != invocations[1].seq
    assert all(len(i.seq) == 32 and int(i.seq, 16) != 0 for i in invocations)


@pytest.mark.parametrize("kind", [ValueError, KeyboardInterrupt, SystemExit])
def test_exception_ends_invocation_with_its_type_and_propagates_unchanged(
    kind: type[BaseException],
) -> None:
    with capture() as trace:
        with pytest.raises(kind, match="boom") as raised:
            explode(kind)
        invocations = trace.invocations()
    assert type(raised.value) is kind
    assert shape(invocations) == [("explode", "", "error", kind.__name__)]


def test_wraps_semantics_are_kept() -> None:
    assert add.__name__ == "add"
    assert add.__qualname__ == "add"
    assert add.__doc__ == "Add two numbers."
    assert inspect.signature(add) == inspect.signature(inspect.unwrap(add))
    assert list(inspect.signature(add).parameters) == ["x", "y"]
    assert inspect.iscoroutinefunction(fetch)
    assert inspect.isgeneratorfunction(numbers)
    assert inspect.isasyncgenfunction(anumbers)
    assert not inspect.iscoroutinefunction(add)
    assert pickle.loads(pickle.dumps(add)) is add


def test_name_override_and_methods() -> None:
    with capture() as trace:
        assert renamed() == "ok"
        assert Shop().method() == "m"
        assert Shop.klass() == "Shop"
        assert Shop().klass() == "Shop"
        assert Shop.static() == "s"
        names = [i.name for i in trace.invocations()]
    assert names == [
        f"{MODULE}.custom-name",
        f"{MODULE}.Shop.method",
        f"{MODULE}.Shop.klass",
        f"{MODULE}.Shop.klass",
        f"{MODULE}.Shop.static",
    ]


def test_equal_functions_of_two_modules_are_each_recorded_under_their_own_name() -> None:
    """Two modules made from the same text (a vendored copy of a file) hold equal code objects
    (code compares by value); each function is still recorded under its own module's name."""
    source = "def price(n):\n    return n * 2\n"
    originals = []
    for module in ("shop_a.pricing", "shop_b.pricing"):
        namespace: dict[str, Any] = {"__name__": module}
        exec(compile(source, "pricing.py", "exec"), namespace)  # the same file name and text
        originals.append(namespace["price"])
    assert originals[0].__code__ == originals[1].__code__  # equal, not the same object
    assert originals[0].__code__ is not originals[1].__code__
    first, second = (traced(function) for function in originals)
    with capture() as trace:
        assert second(2) == 4
        assert first(3) == 6
        names = [i.name for i in trace.invocations()]
    assert names == ["shop_b.pricing.price", "shop_a.pricing.price"]


def test_traced_twice_is_the_same_wrapper() -> None:
    assert traced(add) is add


def test_misuse_gives_a_helpful_error() -> None:
    with pytest.raises(TypeError, match=r"@traced\(name="):
        traced("checkout")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="methods"):
        traced(Shop)
    with pytest.raises(TypeError, match="string"):
        traced(name=3)  # type: ignore[call-overload]


def test_coroutines_nest_within_their_own_task() -> None:
    async def main() -> list[str]:
        return await asyncio.gather(fetch(0.01), fetch(0))

    with capture() as trace:
        assert asyncio.run(main()) == ["parsed", "parsed"]
        invocations = trace.invocations()
    fetches = [i for i in invocations if i.name.endswith(".fetch")]
    parses = [i for i in invocations if i.name.endswith(".parse")]
    assert len(fetches) == 2
    assert len(parses) == 2
    # Interleaved tasks: each parse belongs to its own fetch, in its own sequence.
    assert {(p.parent, p.seq) for p in parses} == {(f.iid, f.seq) for f in fetches}
    assert all(i.status == "ok" for i in invocations)


def test_generator_invocation_lasts_until_exhausted_and_owns_its_body_calls() -> None:
    @traced
    def consume() -> list[int]:
        out = []
        for value in numbers(2):
            out.append(add(value))  # called by consume, between resumptions
        return out

    with capture() as trace:
        assert consume() == [2, 3]
        result = shape(trace.invocations())
    assert result == [
        (
            "test_generator_invocation_lasts_until_exhausted_and_owns_its_body_calls.<locals>.consume",
            "",
            "ok",
            None,
        ),
        (
            "numbers",
            "test_generator_invocation_lasts_until_exhausted_and_owns_its_body_calls.<locals>.consume",
            "ok",
            None,
        ),
        ("add", "numbers", "ok", None),
        (
            "add",
            "test_generator_invocation_lasts_until_exhausted_and_owns_its_body_calls.<locals>.consume",
            "ok",
            None,
        ),
        ("add", "numbers", "ok", None),
        (
            "add",
            "test_generator_invocation_lasts_until_exhausted_and_owns_its_body_calls.<locals>.consume",
            "ok",
            None,
        ),
    ]


def test_generator_closed_early_ends_ok_and_send_throw_pass_through() -> None:
    @traced
    def echo() -> Iterator[object]:
        received: object = None
        while True:
            try:
                received = yield received
            except KeyError:
                received = "caught"

    with capture() as trace:
        gen = echo()
        assert next(gen) is None
        assert gen.send("hello") == "hello"
        assert gen.throw(KeyError("k")) == "caught"
        gen.close()
        invocations = trace.invocations()
    assert [(i.status, i.error) for i in invocations] == [("ok", None)]


def test_a_generator_left_early_or_thrown_into_runs_that_code_in_its_own_invocation() -> None:
    """A loop that breaks out of a traced generator closes it: its finally runs, and the calls
    it makes are the generator's, as are the calls of an except clause a throw lands in."""

    @traced
    def cleanup() -> None:
        pass

    @traced
    def recover() -> None:
        pass

    @traced
    def rows() -> Iterator[int]:
        try:
            while True:
                try:
                    yield 1
                except KeyError:
                    recover()
        finally:
            cleanup()

    @traced
    def first_row() -> int:
        generator = rows()
        next(generator)
        generator.throw(KeyError("k"))
        for row in generator:  # closed as the loop is left, by the last reference going
            return row
        return 0

    with capture() as trace:
        assert first_row() == 1
        invocations = trace.invocations()
    by_iid = {i.iid: i for i in invocations}
    parents = {i.name.rsplit(".", 1)[-1]: by_iid[i.parent].name.rsplit(".", 1)[-1]
               for i in invocations if i.parent}  # fmt: skip
    assert parents == {"rows": "first_row", "recover": "rows", "cleanup": "rows"}


def test_generator_that_raises_ends_with_error() -> None:
    @traced
    def broken() -> Iterator[int]:
        yield 1
        raise LookupError("gone")

    with capture() as trace:
        with pytest.raises(LookupError):
            list(broken())
        invocations = trace.invocations()
    assert [(i.status, i.error) for i in invocations] == [("error", "LookupError")]


def test_generator_return_value_is_kept() -> None:
    @traced
    def returns() -> Iterator[int]:
        yield 1
        return 42

    def delegate() -> Iterator[int]:
        result = yield from returns()
        yield result

    with capture():
        assert list(delegate()) == [1, 42]


def test_async_generator_invocation_and_early_close() -> None:
    async def main() -> tuple[list[int], int]:
        full = [i async for i in anumbers(3)]
        agen = anumbers(10)
        first = await agen.__anext__()
        await agen.aclose()
        return full, first

    with capture() as trace:
        assert asyncio.run(main()) == ([0, 1, 2], 0)
        invocations = trace.invocations()
    assert [(i.name.rsplit(".", 1)[1], i.status) for i in invocations] == [
        ("anumbers", "ok"),
        ("anumbers", "ok"),
    ]


def test_disabled_tracer_records_nothing_and_calls_through() -> None:
    with capture(enabled=False) as trace:
        assert outer(1) == 5
        assert list(numbers(2)) == [1, 2]
        assert trace.invocations() == []


def test_a_failure_inside_the_tracer_is_counted_logged_once_and_never_reaches_user_code(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import tracer
    from tracer._core import decorator, recorder

    def broken_counter() -> int:
        raise RuntimeError("tracer bug")

    monkeypatch.setattr(recorder, "_errors", 0)
    with capture():
        monkeypatch.setattr(decorator, "_next_iid", broken_counter)
        assert outer(1) == 5  # four traced calls, each failing inside the tracer
        assert list(numbers(2)) == [1, 2]
        with pytest.raises(ValueError, match="boom"):
            explode(ValueError)  # the user's own exception still propagates unchanged
    assert tracer.stats().internal_errors == 8
    assert caplog.text.count("internal tracer error") == 1

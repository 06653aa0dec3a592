"""Wrappers compiled with the wrapped function's own parameters (tracer._core.wrapper_shapes):
every kind of parameter passes through as the function would receive it, and what the generated
code cannot take safely gets the generic ``*args, **kwargs`` shape."""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any

import pytest

from tracer._core import decorator, recorder, wrapper_frames, wrapper_shapes
from tracer.testing import capture


def traced(fn: Any) -> Any:
    """The decorator's wrapper of ``fn`` (what ``@traced`` returns where code is not
    instrumented: a callable that is not a function, or no backend)."""
    method = recorder.register_method(fn.__module__, fn.__qualname__, "", 0)
    wrapper = decorator.wrapper_for(fn, method)
    functools.update_wrapper(wrapper, fn)
    return wrapper


DEFAULT: list[int] = []


def every_kind(
    a: int, b: int = 2, /, c: int = 3, *rest: int, d: int, e: list[int] = DEFAULT, **more: int
) -> tuple[Any, ...]:
    return a, b, c, rest, d, e, more


def test_a_shape_is_read_from_the_code_and_written_back_as_the_same_signature() -> None:
    shape = wrapper_shapes.shape_of(every_kind)
    assert shape.parameters() == "a, b, /, c, *rest, d, e, **more"
    assert shape.arguments() == "a, b, c, *rest, d=d, e=e, **more"
    assert wrapper_shapes.shape_of(lambda *, k: k).parameters() == "*, k"
    assert wrapper_shapes.shape_of(functools.partial(every_kind, 1)) is wrapper_shapes.GENERIC
    assert wrapper_shapes.shape_of(len) is wrapper_shapes.GENERIC


def test_every_kind_of_parameter_passes_through_as_the_function_receives_it() -> None:
    wrapped = traced(every_kind)
    with capture(sample_interval_ms=0) as trace:
        assert wrapped(1, d=4) == every_kind(1, d=4)
        assert wrapped(1, 5, 6, 7, 8, d=4, e=[9], x=10) == (1, 5, 6, (7, 8), 4, [9], {"x": 10})
        assert wrapped(1, c=6, d=4)[2] == 6
        assert wrapped(1, d=4)[5] is DEFAULT  # the function's own default object
    assert len(trace.invocations()) == 4
    assert inspect.signature(wrapped) == inspect.signature(every_kind)


def test_wrong_arguments_raise_what_the_function_would_and_name_it() -> None:
    wrapped = traced(every_kind)
    with pytest.raises(TypeError, match="every_kind"):
        wrapped(1)  # d is missing
    with pytest.raises(TypeError, match="every_kind"):
        wrapped(a=1, d=2)  # a is positional-only


def test_parameters_named_like_what_the_wrapper_reads_get_the_generic_shape() -> None:
    def odd(type: int, _clock: int, _ivq_fn: int = 0) -> int:
        return type + _clock + _ivq_fn

    wrapped = traced(odd)
    with capture(sample_interval_ms=0) as trace:
        assert wrapped(1, _clock=2, _ivq_fn=3) == 6
    [call] = trace.invocations()
    assert call.name.endswith("odd")
    assert call.status == "ok"


def test_a_coroutine_wrapper_has_the_coroutines_parameters_and_is_a_known_wrapper_frame() -> None:
    async def fetch(url: str, *, retries: int = 1) -> tuple[str, int]:
        await asyncio.sleep(0)
        return url, retries

    wrapped = traced(fetch)
    with capture(sample_interval_ms=0) as trace:
        assert asyncio.run(wrapped("a", retries=3)) == ("a", 3)
        assert asyncio.run(wrapped(url="b")) == ("b", 1)
    assert [i.status for i in trace.invocations()] == ["ok", "ok"]
    assert inspect.iscoroutinefunction(wrapped)
    assert inspect.unwrap(wrapped).__code__ not in wrapper_frames.WRAPPER_CODES
    assert wrapped.__code__ in wrapper_frames.WRAPPER_CODES  # the sampler and tracebacks know it

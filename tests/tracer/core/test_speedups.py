"""The C accelerator: the same behaviour as the pure-Python hot path, and byte-identical batches.

The whole suite runs once with the C accelerator and once with ``INVOSEQ_PURE=1``; the tests here
check what the two must share (what ``functools.wraps`` keeps, the counter, the clock, fork) in
whichever mode the suite runs, and run both implementations side by side in subprocesses where
the comparison is the point (the batches on the wire, fork, the fallback).
"""

from __future__ import annotations

import copy
import gc
import inspect
import os
import pickle
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

import tracer
from invoseq import wire
from tests.support import write_script
from tests.tracer.core.implementations import (
    _speedups,
    needs_c_build,
    needs_c_path,
    run,
    run_completed,
)
from tracer._core import accel, clock, codes, context, decorator, recorder
from tracer.testing import capture


@tracer.traced
def add(x: int, y: int = 1) -> int:
    """Add two numbers."""
    return x + y


add.marker = "kept"  # type: ignore[attr-defined]


class Shop:
    @tracer.traced
    def price(self, item: str, *, vat: float = 0.2) -> str:
        return f"{item}+{vat}"

    @tracer.traced
    @classmethod
    def make(cls) -> Shop:
        return cls()

    @staticmethod
    @tracer.traced
    def static(x: int) -> int:
        return x


# -- selection ---------------------------------------------------------------------------------


def test_the_extension_was_built_by_the_install() -> None:
    assert _speedups is not None, (
        "tracer._core._speedups did not build: `pip install -e .` compiles it when gcc and the "
        "Python headers are installed (the tracer still works without it, in pure Python)"
    )


def test_the_active_implementation_follows_invoseq_pure() -> None:
    expected = "python" if os.environ.get("INVOSEQ_PURE") == "1" or _speedups is None else "c"
    assert expected == decorator.IMPLEMENTATION
    backend = codes.backend()
    if backend is not None:  # the code is instrumented: PY_START's handler is C or Python
        start = backend.handlers.start  # type: ignore[attr-defined]
        c_handler = start in (_speedups.monitor_start, _speedups.hook_start) if _speedups else False
        assert c_handler == (expected == "c")
        assert c_handler or type(start).__name__ == "function"
    else:
        wrapper_type = type(add).__name__
        assert wrapper_type == ("TracedFunction" if expected == "c" else "function")


#: What a program puts in place of the C accelerator before ``import tracer``, by case.
UNUSABLE_ACCELERATORS = {
    # the import fails, as when the build failed
    "not built": 'sys.modules["tracer._core._speedups"] = None',
    # an editable checkout whose accelerator was built before its sources changed
    "built from other sources": (
        'sys.modules["tracer._core._speedups"] = types.ModuleType("tracer._core._speedups");'
        ' sys.modules["tracer._core._speedups"].INTERFACE = 1'
    ),
}


@pytest.mark.system
@pytest.mark.parametrize("case", sorted(UNUSABLE_ACCELERATORS))
def test_without_a_usable_extension_the_pure_python_path_runs_and_says_why(
    tmp_path: Path, case: str
) -> None:
    """An accelerator built from older sources once failed ``import tracer``
    (``AttributeError``): it is left unused, with a warning that says how to rebuild it."""
    script = write_script(
        tmp_path / "unusable.py",
        f"""
        import sys, types
        {UNUSABLE_ACCELERATORS[case]}
        import tracer
        from tracer._core import accel, decorator
        from tracer.testing import capture

        @tracer.traced
        def f():
            return 1

        with capture() as trace:
            f()
            print(decorator.IMPLEMENTATION, [i.status for i in trace.invocations()])
        print(accel.why_pure)
        """,
    )
    done = run_completed(script, pure=False)
    first, why = done.stdout.splitlines()
    assert first.split() == ["python", "['ok']"]
    if case == "not built":
        assert why.startswith("the C accelerator did not import")
    else:
        assert "its interface 1" in why
        assert "rebuild it" in why
        assert "rebuild it" in done.stderr


@needs_c_build
def test_the_built_c_accelerator_has_the_interface_the_python_code_expects() -> None:
    assert _speedups.INTERFACE == accel.INTERFACE


@needs_c_build
@pytest.mark.system
def test_invoseq_pure_forces_python_and_its_absence_selects_c(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "which.py", "from tracer._core import decorator; print(decorator.IMPLEMENTATION)"
    )
    assert run(script, pure=True).strip() == "python"
    assert run(script, pure=False).strip() == "c"


# -- what the wrapper keeps of the function (both paths) --------------------------------------


def test_functools_wraps_semantics() -> None:
    assert add.__name__ == "add"
    assert add.__qualname__ == "add"
    assert add.__module__ == __name__
    assert add.__doc__ == "Add two numbers."
    assert inspect.unwrap(add).__name__ == "add"  # the function, or through a wrapper to it
    assert add.__annotations__ == {"x": "int", "y": "int", "return": "int"}
    assert add.marker == "kept"  # type: ignore[attr-defined]
    assert str(inspect.signature(add)) == "(x: 'int', y: 'int' = 1) -> 'int'"
    assert "add" in repr(add)
    assert add(1) == 2
    assert add(1, y=5) == 6


def test_pickled_and_copied_by_reference() -> None:
    assert pickle.loads(pickle.dumps(add)) is add
    assert pickle.loads(pickle.dumps(Shop.price)) is Shop.price
    assert pickle.loads(pickle.dumps(add, protocol=2)) is add
    assert copy.copy(add) is add
    assert copy.deepcopy(add) is add


def test_methods_bind_like_functions() -> None:
    shop = Shop()
    assert Shop.__dict__["price"].__get__(None, Shop) is Shop.price
    assert shop.price("tea") == "tea+0.2"
    assert Shop.price(shop, "tea", vat=0.1) == "tea+0.1"
    assert shop.price.__self__ is shop  # type: ignore[attr-defined]
    assert list(inspect.signature(shop.price).parameters) == ["item", "vat"]
    assert isinstance(Shop.make(), Shop)
    assert isinstance(shop.make(), Shop)
    assert Shop.static(3) == shop.static(3) == 3
    assert inspect.ismethod(shop.price)


def test_special_methods_keep_the_roles_class_creation_gives_them() -> None:
    class Base:
        subclassed: list[tuple[str, dict[str, int]]] = []  # noqa: RUF012

        @tracer.traced
        def __init_subclass__(cls, **options: int) -> None:
            Base.subclassed.append((cls.__name__, options))

        @tracer.traced
        def __new__(cls, *args: object) -> Base:
            return super().__new__(cls)

        @tracer.traced
        def __class_getitem__(cls, item: type) -> tuple[type, type]:
            return cls, item

        @tracer.traced
        def __call__(self, x: int) -> int:
            return x * 2

    class Child(Base, size=3):
        pass

    with capture() as trace:
        assert Child()(4) == 8
        assert Base[int] == (Base, int)
        names = [i.name.rsplit(".", 1)[1] for i in trace.invocations()]
    assert Base.subclassed == [("Child", {"size": 3})]
    assert names == ["__new__", "__call__", "__class_getitem__"]


def test_a_wrapper_can_be_weakly_referenced_and_is_collected() -> None:
    def local() -> int:
        return 1

    wrapper = tracer.traced(local)
    ref = weakref.ref(wrapper)
    assert ref() is wrapper
    del wrapper, local
    gc.collect()
    assert ref() is None


def test_the_users_exception_object_propagates_with_its_traceback() -> None:
    failure = LookupError("missing")

    @tracer.traced
    def fails() -> None:
        raise failure

    with capture() as trace:
        with pytest.raises(LookupError) as raised:
            fails()
        invocations = trace.invocations()
    assert raised.value is failure
    assert raised.value.__context__ is None
    assert raised.traceback[-1].name == "fails"
    assert [(i.status, i.error) for i in invocations] == [("error", "LookupError")]


def test_a_long_error_type_name_is_cut_to_the_wire_limit() -> None:
    long_error = type("É" * (wire.MAX_NAME + 50), (Exception,), {})

    @tracer.traced
    def fails() -> None:
        raise long_error

    with capture() as trace:
        with pytest.raises(long_error):
            fails()
        (invocation,) = trace.invocations()
    assert invocation.error == "É" * wire.MAX_NAME


# -- what both paths share -----------------------------------------------------------------------


def test_one_invocation_counter_for_every_wrapper() -> None:
    @tracer.traced
    def generator() -> Iterator[int]:
        yield 1

    with capture() as trace:
        before = recorder.next_iid()
        add(1)  # the sync wrapper (C with the accelerator)
        list(generator())  # a Python wrapper
        after = recorder.next_iid()
        iids = [i.iid for i in trace.invocations()]
    assert iids == [before + 1, before + 2]
    assert after == before + 3


def test_event_times_come_from_perf_counter_ns() -> None:
    with capture() as trace:
        first = time.perf_counter_ns()
        add(1)
        last = time.perf_counter_ns()
        (invocation,) = trace.invocations()
    assert invocation.end_ns is not None
    assert first <= invocation.start_ns <= invocation.end_ns <= last


@needs_c_build
@pytest.mark.skipif(sys.platform != "linux", reason="the C clock is Linux's CLOCK_MONOTONIC")
def test_the_c_clock_is_perf_counter_ns_whether_it_reads_the_tsc_or_not() -> None:
    assert time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"
    # read long enough for the TSC's rate to be measured (10 ms), where the kernel reads the TSC
    started = time.perf_counter_ns()
    while time.perf_counter_ns() - started < 30_000_000:
        _speedups.clock()
    # the clock is the C one only with the C accelerator (INVOSEQ_PURE=1 reads perf_counter_ns)
    assert _speedups.clock_reads_tsc() == (clock.tsc_allowed() and accel.speedups is not None)
    previous = 0
    for _ in range(200_000):  # several of the clock's 50 ms segments
        first = time.perf_counter_ns()
        between = _speedups.clock()
        last = time.perf_counter_ns()
        assert first <= between <= last
        assert between >= previous
        previous = between


@needs_c_build
@pytest.mark.system
def test_invoseq_clock_monotonic_keeps_the_tsc_out(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "clock.py",
        """
        import os, time
        from tracer._core import _speedups, clock
        started = time.perf_counter_ns()
        while time.perf_counter_ns() - started < 30_000_000:
            _speedups.clock()
        print(clock.tsc_allowed(), _speedups.clock_reads_tsc())
        """,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(clock.ENV_CLOCK, "monotonic")
        assert run(script, pure=False).split() == ["False", "False"]


def test_a_failing_clock_is_counted_and_leaves_no_context_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_clock() -> int:
        raise RuntimeError("clock bug")

    monkeypatch.setattr(recorder, "_errors", 0)
    with capture() as trace:
        with monkeypatch.context() as patch:
            patch.setattr(decorator, "_clock", broken_clock)
            assert add(2) == 3
            assert context.current_sequence() is None  # no sequence left behind
        assert tracer.stats().internal_errors == 1
        assert add(3) == 4  # the real clock is back, in C too
        assert [i.status for i in trace.invocations()] == ["ok"]


def test_many_short_lived_threads_each_record_in_order() -> None:
    def work(n: int) -> None:
        for i in range(n):
            add(i)

    with capture() as trace:
        for _ in range(5):
            threads = [threading.Thread(target=work, args=(20,)) for _ in range(10)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            gc.collect()  # ended threads' buffers are freed while others are recorded
        invocations = trace.invocations()
    assert len(invocations) == 5 * 10 * 20
    assert all(i.status == "ok" and i.end_ns is not None for i in invocations)
    assert len({i.tid for i in invocations}) == 50


@needs_c_path
def test_a_thread_inside_a_c_wrapped_call_is_known_to_the_sampler() -> None:
    seen: list[bool] = []

    @tracer.traced
    def inside() -> None:
        seen.append(threading.get_ident() in recorder.threads_in_c_calls())

    with capture():
        inside()
        assert threading.get_ident() not in recorder.threads_in_c_calls()
    assert seen == [True]

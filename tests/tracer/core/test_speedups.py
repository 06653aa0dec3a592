"""The C accelerator: the same behaviour as the pure-Python hot path, and byte-identical batches.

The whole suite runs once with the C accelerator and once with ``INVOSEQ_PURE=1``; the tests here
check what the two must share (what ``functools.wraps`` keeps, the counter, the clock, fork) in
whichever mode the suite runs, and run both implementations side by side in subprocesses where
the comparison is the point (the batches on the wire, fork, the fallback).
"""

from __future__ import annotations

import copy
import gc
import importlib
import inspect
import json
import os
import pickle
import subprocess
import sys
import threading
import time
import tracemalloc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracer
from tests.support import write_script
from tracer import wire
from tracer._core import context, decorator, recorder
from tracer.testing import capture

try:
    _speedups: Any = importlib.import_module("tracer._core._speedups")
except ImportError:
    _speedups = None

C_ACTIVE = decorator.IMPLEMENTATION == "c"
needs_c_build = pytest.mark.skipif(_speedups is None, reason="the C accelerator is not built")
needs_c_path = pytest.mark.skipif(not C_ACTIVE, reason="the suite runs the pure-Python path")


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


def run(script: Path, *, pure: bool, timeout: float = 120) -> str:
    env = {k: v for k, v in os.environ.items() if k != "INVOSEQ_PURE"}
    if pure:
        env["INVOSEQ_PURE"] = "1"
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- selection ---------------------------------------------------------------------------------


def test_the_extension_was_built_by_the_install() -> None:
    assert _speedups is not None, (
        "tracer._core._speedups did not build: `pip install -e .` compiles it when gcc and the "
        "Python headers are installed (the tracer still works without it, in pure Python)"
    )


def test_the_active_implementation_follows_invoseq_pure() -> None:
    expected = "python" if os.environ.get("INVOSEQ_PURE") == "1" or _speedups is None else "c"
    assert expected == decorator.IMPLEMENTATION
    wrapper_type = type(add).__name__
    assert wrapper_type == ("TracedFunction" if expected == "c" else "function")


@pytest.mark.system
def test_without_the_extension_the_pure_python_path_is_selected(tmp_path: Path) -> None:
    script = write_script(
        tmp_path / "blocked.py",
        """
        import sys
        sys.modules["tracer._core._speedups"] = None  # the import fails, as when the build failed
        import tracer
        from tracer._core import decorator
        from tracer.testing import capture

        @tracer.traced
        def f():
            return 1

        with capture() as trace:
            f()
            print(decorator.IMPLEMENTATION, [i.status for i in trace.invocations()])
        """,
    )
    assert run(script, pure=False).split() == ["python", "['ok']"]


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
    assert add.__wrapped__.__name__ == "add"  # type: ignore[attr-defined]
    assert add.__annotations__ == {"x": "int", "y": "int", "return": "int"}
    assert add.marker == "kept"  # type: ignore[attr-defined]
    assert vars(add)["__wrapped__"] is add.__wrapped__  # type: ignore[attr-defined]
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
def test_the_c_clock_is_perf_counter_ns() -> None:
    assert time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"
    for _ in range(1000):
        first = time.perf_counter_ns()
        between = _speedups.clock()
        last = time.perf_counter_ns()
        assert first <= between <= last


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
            assert context.current.get() is None
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


# -- the C buffer: no allocation per event, and msgspec's bytes ----------------------------------


@needs_c_path
def test_recording_allocates_nothing_per_event_once_the_buffer_has_grown() -> None:
    events = recorder.thread_events()
    assert isinstance(events, _speedups.EventBuffer)

    def record(calls: int) -> None:
        for i in range(calls):
            add(i)

    quiet = {"flush_interval_ms": 3_600_000, "heartbeat_ms": 3_600_000, "sample_interval_ms": 0}
    with capture(**quiet):  # no other thread drains or allocates meanwhile
        for _ in range(2):  # grows the array, then the spare one
            record(5000)
            events.take()
        tracemalloc.start()
        try:
            record(1)  # first-call effects out of the measurement
            before, _ = tracemalloc.get_traced_memory()
            record(5000)
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(events) >= 10_000
    assert held - before < 5000  # under a byte per event: they wait in preallocated records


ints = st.one_of(
    st.integers(0, 300),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63, -32, -33]),
    st.sampled_from([-128, -129, -32768, -32769, -(2**31), -(2**31) - 1]),
)
ids_ = st.integers(0, 2**64 - 1)
names = st.text(max_size=40) | st.text(min_size=250, max_size=300) | st.sampled_from(["a" * 70000])
seqs = st.binary(min_size=16, max_size=16) | st.binary(max_size=20)
starts = st.tuples(st.just(0), ids_, ids_, ids_, ids_, ints, seqs)
ends = st.tuples(st.just(1), ids_, ints)
errors = st.tuples(st.just(2), ids_, ints, names)
handoffs = st.tuples(st.just(3), ids_, ids_, names, ids_, ints, seqs)
odd = st.one_of(
    st.tuples(st.sampled_from([0, 1, 2, 3, True, -1, 9]), ints),
    st.lists(st.integers(0, 5), max_size=3),
    st.none(),
    st.tuples(st.just(1), st.booleans(), ints),
)
any_events = st.lists(st.one_of(starts, ends, errors, handoffs, odd), max_size=60)


@needs_c_path
@settings(max_examples=300, deadline=None)
@given(events=any_events, cut=st.tuples(st.integers(-70, 70), st.integers(-70, 70)))
def test_the_c_encoding_is_msgspecs_byte_for_byte(events: list[Any], cut: tuple[int, int]) -> None:
    buffer = _speedups.EventBuffer()
    for event in events:
        buffer.append(event)
    assert len(buffer) == len(events)
    taken = buffer.take()
    assert len(buffer) == 0
    if not events:
        assert taken is None
        return
    assert len(taken) == len(events)
    assert taken.msgpack() == msgspec.msgpack.encode(events)
    start, stop = cut
    assert taken[start:stop].msgpack() == msgspec.msgpack.encode(events[start:stop])
    assert len(taken[start:stop]) == len(events[start:stop])
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(events))
    assert list(taken) == decoded  # indexing decodes an event (its tuple's items, as a list)
    assert list(reversed(taken[start:stop])) == decoded[start:stop][::-1]
    assert taken[-1] == decoded[-1]


@needs_c_path
def test_a_taken_buffer_keeps_recording_into_its_spare_array() -> None:
    buffer = _speedups.EventBuffer()
    seq = bytes(range(16))
    for round_ in range(3):
        events = [(1, i, round_) for i in range(1000)] + [(0, 1, 2, 3, 4, 5, seq)]
        for event in events:
            buffer.append(event)
        taken = buffer.take()
        assert taken is not None
        assert taken.msgpack() == msgspec.msgpack.encode(events)
    assert buffer.take() is None


@needs_c_path
def test_a_buffer_gives_the_sender_exactly_the_events_it_counted() -> None:
    buffer = _speedups.EventBuffer()
    events = [(1, i, i) for i in range(3000)]  # past the size where arrays are mapped
    for event in events[:2000]:
        buffer.append(event)
    counted = len(buffer)
    for event in events[2000:]:  # recorded after the sender counted: they stay, in order
        buffer.append(event)
    taken = buffer.take(counted)
    assert taken is not None
    assert taken.msgpack() == msgspec.msgpack.encode(events[:2000])
    assert len(buffer) == 1000
    rest = buffer.take()
    assert rest is not None
    assert rest.msgpack() == msgspec.msgpack.encode(events[2000:])
    assert buffer.take(5) is None


# -- both implementations side by side ---------------------------------------------------------

DETERMINISTIC_PROGRAM = """
import asyncio, itertools, json, threading
import msgspec
import tracer
from tracer._core import context, decorator, handoff, ids
from tracer import _runtime as runtime, wire

# Fixed sources, so two runs can be compared byte for byte: a clock that visits every integer
# width (negative ones too), sequence and hand-off ids from counters, a fixed process identity
# and native thread id. The iid counter starts at 1 in a fresh process either way.
times = itertools.cycle([3, 200, 70_000, 2**33, 2**62, -3, -200, -70_000, -2**40])
seqs = itertools.count(1)
hids = itertools.count(2**40)
decorator._clock = handoff._clock = lambda: next(times)
decorator._new_seq = lambda: next(seqs).to_bytes(16, "big")
ids.new_id63 = lambda: next(hids)
ids._identity = ids.ProcessIdentity(1, 2, "host", "platform", 0, 0, ("prog",))
threading.get_native_id = lambda: 7

bodies = []

class RawTransport:
    def __init__(self):
        self.acks = []
    def send(self, body):
        bodies.append(body.hex())
        puid, batch_no = (msgspec.msgpack.decode(raw) for raw in
                          msgspec.msgpack.decode(body, type=list[msgspec.Raw])[:2])
        self.acks.append(wire.Ack(puid, batch_no))
        return True
    def receive_acks(self, timeout_ms):
        acks, self.acks = self.acks, []
        return acks
    def close(self):
        pass

LongError = type("Ünïcode" + "e" * 1100, (Exception,), {})

@tracer.traced
def leaf(x):
    return x + 1

@tracer.traced
def fails(kind):
    raise kind("no")

@tracer.traced
def numbers(n):
    for i in range(n):
        yield leaf(i)

@tracer.traced
async def coroutine():
    await asyncio.sleep(0)
    return leaf(1)

class Shop:
    @tracer.traced
    def price(self):
        return leaf(2)

@tracer.traced
def root():
    leaf(1)
    for kind in (ValueError, LongError, KeyError):
        try:
            fails(kind)
        except kind:
            pass
    list(numbers(3))
    asyncio.run(coroutine())
    Shop().price()
    handoff.record("thread", leaf)
    worker = threading.Thread(target=leaf, args=(5,), name="worker")
    worker.start()
    worker.join()
    token = context.current.set((b"short", 99, 0))  # a context no record layout fits
    try:
        leaf(2)
    finally:
        context.current.reset(token)

runtime._transport_factory = lambda config: RawTransport()
tracer.configure(
    flush_interval_ms=3_600_000, heartbeat_ms=3_600_000, batch_events=5, spool_bytes=0,
    sample_interval_ms=0,
)
root()
leaf(3)
assert runtime.flush(30)
tracer.shutdown(30)
print(json.dumps({"implementation": decorator.IMPLEMENTATION, "bodies": bodies}))
"""


@needs_c_build
@pytest.mark.system
def test_both_implementations_send_byte_identical_batches(tmp_path: Path) -> None:
    script = write_script(tmp_path / "program.py", DETERMINISTIC_PROGRAM)
    pure = json.loads(run(script, pure=True))
    accelerated = json.loads(run(script, pure=False))
    assert (pure["implementation"], accelerated["implementation"]) == ("python", "c")
    assert accelerated["bodies"] == pure["bodies"]

    # What was compared is the real thing: several batches, two threads, every kind of event.
    batches = [msgspec.msgpack.decode(bytes.fromhex(body)) for body in pure["bodies"]]
    chunks = [chunk for batch in batches for chunk in batch[5]]
    events = [event for _, events in chunks for event in events]
    assert len(batches) > 5
    assert {tid for tid, _ in chunks} == {1, 2}
    assert {event[0] for event in events} == {0, 1, 2, 3}
    assert sum(event[0] == 0 for event in events) == sum(event[0] in (1, 2) for event in events)
    errors = [event[3] for event in events if event[0] == 2]
    assert errors == ["ValueError", ("Ünïcode" + "e" * 1100)[: wire.MAX_NAME], "KeyError"]


FORK_PROGRAM = """
import json, os, sys
import tracer
from tracer._core import context, decorator, recorder
from tracer import _runtime as runtime
from tracer.testing import capture

@tracer.traced
def work():
    return context.current_sequence()

with capture(flush_interval_ms=3_600_000, sample_interval_ms=0) as trace:
    work()  # buffered in the parent, not yet sent (the flush interval is long)
    pid = os.fork()
    if pid == 0:
        report = {
            "buffered": recorder.buffered(),
            "seq": work(),
            "names": [(i.name.rsplit(".", 1)[1], i.tid) for i in trace.invocations()],
        }
        print(json.dumps(report), flush=True)
        tracer.shutdown(5)
        os._exit(0)
    seq = work()
    os.waitpid(pid, 0)
    print(json.dumps({"seq": seq, "count": len(trace.invocations())}), flush=True)
"""


@needs_c_build
@pytest.mark.parametrize("pure", [True, False], ids=["python", "c"])
@pytest.mark.system
def test_a_forked_child_starts_with_empty_buffers_and_a_fresh_seed(
    tmp_path: Path, pure: bool
) -> None:
    script = write_script(tmp_path / "forks.py", FORK_PROGRAM)
    child_line, parent_line = run(script, pure=pure).splitlines()
    child, parent = json.loads(child_line), json.loads(parent_line)
    assert child["buffered"] == 0  # the parent sends its own events
    assert child["names"] == [["work", 2]]  # only its own call, from a newly registered thread
    assert child["seq"] != parent["seq"]  # the child does not repeat the parent's draws
    assert parent["count"] == 2

"""One memory bound per process: every thread's buffer and the sender's batches under one budget.

The suite runs once with the C accelerator and once with INVOSEQ_PURE=1, so each test here holds
for both hot paths. Work is fixed by count; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tracer
from invoseq import wire
from tracer._core import accel, budget, hooks, recorder
from tracer._shipping.delivery import Delivery, Outgoing
from tracer._shipping.endpoints import Nodes
from tracer._shipping.spool import Spool
from tracer._shipping.transport import Transport
from tracer.testing import capture

HOUR_MS = 3_600_000
THREADS = 8


@tracer.traced
def work(n: int) -> int:
    return n * 2


WORK = f"{__name__}.work"  # its invocations' name


@tracer.traced
async def work_async(n: int) -> int:
    return n * 3


@tracer.traced
def work_steps(n: int) -> Iterator[int]:
    yield n
    yield n + 1


@tracer.traced
def inner(n: int) -> int:
    return n + 1


@tracer.traced
def delivering(n: int) -> int:
    """Lets the bound go (the flush delivers what was buffered), then calls ``inner``."""
    tracer.flush()
    return sum(inner(i) for i in range(n))


@tracer.traced
def delivering_steps(n: int) -> Iterator[int]:
    """``delivering`` as a generator: its first step lets the bound go, each yields a call's."""
    tracer.flush()
    for i in range(n):
        yield inner(i)


@tracer.traced
async def delivering_async(n: int) -> int:
    """``delivering`` as a coroutine, giving the loop a turn between its calls."""
    tracer.flush()
    total = 0
    for i in range(n):
        total += inner(i)
        await asyncio.sleep(0)
    return total


class Untraced:
    """``[0]``: the calls the bound turned away since the test began (``budget.overflowed``:
    those ``budget.overflow`` counted and those the C accelerator counted itself)."""

    def __init__(self) -> None:
        self.before = budget.overflowed()

    def __getitem__(self, index: int) -> int:
        assert index == 0
        return budget.overflowed() - self.before


@pytest.fixture(name="untraced")
def fixture_untraced() -> Untraced:
    return Untraced()


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """``count`` threads started together, each running ``target(index)``; joined (bounded)."""
    barrier = threading.Barrier(count, timeout=60)

    def run(index: int) -> None:
        barrier.wait()
        target(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)


def calling(count: int) -> Callable[[int], None]:
    def run(_: int) -> None:
        for i in range(count):
            assert work(i) == 2 * i

    return run


def test_many_threads_with_no_repository_stay_within_one_bound_and_every_call_is_counted(
    tmp_path: Path, untraced: Untraced
) -> None:
    bound = 2000  # events, for the whole process
    calls = 3000  # per thread: 8 threads record 48,000 events
    gc.collect()  # a traced generator an earlier test abandoned in a cycle records its End now
    # What earlier tests left in the buffers, and the End of a generator they left suspended that
    # ends unseen at a drain, go with this test's batches: counted with its drops.
    earlier = recorder.buffered() + len(hooks._strands)
    tracer.configure(
        endpoint=f"ipc://{tmp_path}/nobody.sock",
        max_buffered_bytes=bound * budget.EVENT_BYTES,
        batch_events=100,
        flush_interval_ms=1,  # the sender drains while the threads record
        spool_bytes=0,  # nothing can keep what the repository does not take
        flush_timeout_ms=0,
        sample_interval_ms=0,
    )
    results = [0] * THREADS
    most = [0] * THREADS  # the most events buffered in all threads together, as each saw it

    def record(index: int) -> None:
        for i in range(calls):
            results[index] += work(i)
            if i % 25 == 0:
                most[index] = max(most[index], recorder.buffered())

    run_threads(THREADS, record)
    tracer.shutdown()
    stats = tracer.stats()
    assert results == [2 * sum(range(calls))] * THREADS  # every call returned its value
    # The process-wide bound, not one per thread; a thread may pass its allowance by the End of
    # its call in flight (trees stay whole), and by one Start while the sender trims it.
    assert max(most) <= bound + 2 * THREADS
    assert untraced[0] > 0  # past the bound, calls ran untraced ...
    assert stats.sent_events == 0  # (nobody listens)
    counted = stats.dropped_events - 2 * THREADS * calls  # ... and, like dropped batches, counted
    assert 0 <= counted <= earlier
    assert budget.held() == 0  # the sender let go of everything it held


def test_tracing_resumes_once_the_sender_has_delivered(
    untraced: Untraced, monkeypatch: pytest.MonkeyPatch
) -> None:
    bound = 1000
    quiet = {"flush_interval_ms": HOUR_MS, "heartbeat_ms": HOUR_MS, "sample_interval_ms": 0}
    with capture(max_buffered_bytes=bound * budget.EVENT_BYTES, **quiet) as trace:
        monkeypatch.setattr(budget, "on_threads_full", lambda: None)  # no early drain either
        # Nothing drains until the flush: 4 threads making 1000 calls (8,000 events) meet it.
        run_threads(4, calling(1000))
        # Flushes: delivered, acknowledged, let go. Only this test's calls: under xdist a
        # worker's earlier test may leave a traced call that ends inside this capture.
        first = [i for i in trace.invocations() if i.name == WORK]
        assert 0 < len(first) <= (bound + 4) // 2
        assert all(i.status == "ok" for i in first)  # a traced call is traced whole
        assert untraced[0] == 4000 - len(first)
        assert tracer.stats().dropped_events == 2 * untraced[0]
        assert budget.held() == 0

        run_threads(4, calling(100))  # 800 events: room for all
        assert len([i for i in trace.invocations() if i.name == WORK]) == len(first) + 400
        assert untraced[0] == 4000 - len(first)  # none turned away this time


def test_coroutines_and_generators_are_bounded_too(
    untraced: Untraced, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet = {"flush_interval_ms": HOUR_MS, "heartbeat_ms": HOUR_MS, "sample_interval_ms": 0}
    with capture(max_buffered_bytes=40 * budget.EVENT_BYTES, **quiet) as trace:
        monkeypatch.setattr(budget, "on_threads_full", lambda: None)  # nothing drains early

        def record(_: int) -> None:  # a fresh thread: no allowance reserved before the test
            for i in range(100):
                assert asyncio.run(work_async(i)) == 3 * i
                assert list(work_steps(i)) == [i, i + 1]

        run_threads(1, record)
        traced = trace.invocations()
        assert 0 < len(traced) <= 21  # 40 events, and one End in flight
        assert all(i.status == "ok" for i in traced)
        assert untraced[0] == 200 - len(traced)

        run_threads(1, record)  # the flush let the first ones go: room again
        assert len(trace.invocations()) > len(traced)


def test_the_calls_inside_a_root_past_the_bound_are_untraced_with_it_not_sequences_of_their_own(
    untraced: Untraced, monkeypatch: pytest.MonkeyPatch
) -> None:
    quiet = {"flush_interval_ms": HOUR_MS, "heartbeat_ms": HOUR_MS, "sample_interval_ms": 0}
    with capture(max_buffered_bytes=40 * budget.EVENT_BYTES, **quiet) as trace:
        monkeypatch.setattr(budget, "on_threads_full", lambda: None)  # nothing drains early

        def record(_: int) -> None:
            for i in range(30):  # 60 events: past the bound of 40
                work(i)
            assert delivering(10) == sum(range(1, 11))  # a root past it: untraced

        run_threads(1, record)
        names = [i.name for i in trace.invocations()]
    traced = names.count(f"{__name__}.work")
    # its calls found room again once it had flushed: they too ran untraced, counted, instead of
    # each rooting a sequence of one call
    assert names == [f"{__name__}.work"] * traced
    assert 0 < traced <= 21
    assert untraced[0] == (30 - traced) + 1 + 10


def resumed_elsewhere(steps: Iterator[int]) -> int:
    """The first step here, the rest on a new thread (one that has recorded nothing)."""
    total = [next(steps)]
    thread = threading.Thread(target=lambda: total.append(sum(steps)))
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    return sum(total)


@pytest.mark.parametrize("kind", ["generator", "generator resumed elsewhere", "coroutine"])
def test_the_calls_inside_a_generator_or_coroutine_root_past_the_bound_are_untraced_with_it(
    untraced: Untraced, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    quiet = {"flush_interval_ms": HOUR_MS, "heartbeat_ms": HOUR_MS, "sample_interval_ms": 0}
    with capture(max_buffered_bytes=40 * budget.EVENT_BYTES, **quiet) as trace:
        monkeypatch.setattr(budget, "on_threads_full", lambda: None)  # nothing drains early

        def record(_: int) -> None:
            for i in range(30):  # 60 events: past the bound of 40
                work(i)
            # a root past it, untraced, whose steps call inner once the bound has let go
            if kind == "generator":
                assert sum(delivering_steps(10)) == sum(range(1, 11))
            elif kind == "generator resumed elsewhere":
                assert resumed_elsewhere(delivering_steps(10)) == sum(range(1, 11))
            else:
                assert asyncio.run(delivering_async(10)) == sum(range(1, 11))

        run_threads(1, record)
        names = [i.name for i in trace.invocations()]
    traced = names.count(f"{__name__}.work")
    # its steps' calls ran untraced and counted, as a synchronous root's do, not each rooting a
    # sequence of one call
    assert names == [f"{__name__}.work"] * traced
    assert 0 < traced <= 21
    assert untraced[0] == (30 - traced) + 1 + 10


def test_the_sender_is_woken_once_the_threads_hold_a_quarter_of_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quiet = {"flush_interval_ms": HOUR_MS, "heartbeat_ms": HOUR_MS, "sample_interval_ms": 0}
    with capture(max_buffered_bytes=1000 * budget.EVENT_BYTES, **quiet):
        woken: list[int] = []
        monkeypatch.setattr(budget, "on_threads_full", lambda: woken.append(recorder.buffered()))
        run_threads(1, calling(1000))
    assert woken  # the sender drains a busy program before its interval is up ...
    assert min(woken) >= 200  # ... once they hold a quarter (less the last chunk reserved)


class Node:
    """A repository node in memory that is down (refuses sends) until ``up``."""

    def __init__(self) -> None:
        self.up = False
        self._acks: list[wire.Ack] = []

    def send(self, body: bytes) -> bool:
        if self.up:
            self._acks.append(wire.Ack(1, int(body[:8])))
        return self.up

    def receive_acks(self, timeout_ms: int) -> list[wire.Ack]:
        acks, self._acks = self._acks, []
        return acks

    def close(self) -> None:
        pass


def test_queued_batches_past_their_share_go_to_the_spool_and_every_byte_is_given_back(
    tmp_path: Path,
) -> None:
    node = Node()
    memory: list[int] = []
    transports: dict[str, Transport] = {"a": node}
    delivery = Delivery(
        Nodes(transports),
        window=4,
        queue_batches=256,
        spool=Spool(str(tmp_path), 2**20, "test"),
        resend_ns=10**12,
        queue_bytes=3 * 100,  # three of these batches
        on_memory=memory.append,
    )
    try:
        for batch_no in range(1, 11):
            body = b"%08d" % batch_no + bytes(92)  # 100 bytes
            delivery.submit(Outgoing(1, batch_no, body, events=2))
            delivery.pump()  # refused: the repository is down
            # The queue's share, and the batch the transport refused (it goes first next time);
            # the rest went to disk.
            assert sum(memory) <= 300 + 100
        assert delivery.counters.spooled_batches == 6
        node.up = True
        for _ in range(10):  # the spool (charged as it is read back) first, then the queue
            delivery.pump()
            delivery.collect(0)
        assert delivery.counters.sent_events == 20
        assert not delivery.pending()
        assert sum(memory) == 0
        assert max(memory) == 100  # replayed batches were counted too
    finally:
        delivery.close()


@tracer.traced
def calling_work(n: int) -> int:
    return sum(work(i) for i in range(n))


@pytest.mark.skipif(accel.speedups is None, reason="the C accelerator remembers refusals")
def test_a_sequence_past_the_bound_asks_once_until_memory_comes_back_and_stays_named(
    untraced: Untraced, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bound a call runs untraced and is counted; with the C accelerator the budget is
    asked once for a sequence, and its next calls are counted without a Python call (a program
    the repository cannot keep up with would pay more for each untraced call than for a traced
    one), until memory comes back. Every call is still counted, and every take still names the
    sequence lossy."""
    speedups = accel.speedups
    assert speedups is not None
    refused: list[object] = []  # the refusals the budget was asked for

    def refill(sink: object, current: object) -> bool | None:
        granted = budget.refill(sink, current)  # type: ignore[arg-type]
        if not granted:
            refused.append(current)
        return granted

    quiet = {"flush_interval_ms": HOUR_MS, "heartbeat_ms": HOUR_MS, "sample_interval_ms": 0}
    with capture(max_buffered_bytes=40 * budget.EVENT_BYTES, **quiet) as trace:
        monkeypatch.setattr(budget, "on_threads_full", lambda: None)  # nothing drains early
        speedups.set_refill(refill)
        try:
            results: list[int] = []
            run_threads(1, lambda _: results.append(calling_work(1000)))
            first_refused = len(refused)
            trace.flush()  # memory comes back: the next refusal is asked again
            run_threads(1, lambda _: results.append(calling_work(1000)))
        finally:
            speedups.set_refill(budget.refill)
        recorded = [i for i in trace.invocations() if i.name == f"{__name__}.work"]
        lost = {bytes(seq).hex() for batch in trace.batches for seq in batch.lost_seqs}
    assert results == [2 * sum(range(1000))] * 2
    assert untraced[0] == 2000 - len(recorded)
    assert untraced[0] > 1000
    assert 1 <= first_refused <= 3  # a refusal remembered, not a thousand asked for
    assert first_refused < len(refused) <= 2 * first_refused + 2
    roots = {i.seq for i in trace.invocations() if i.name == f"{__name__}.calling_work"}
    assert len(roots) == 2
    assert roots <= lost

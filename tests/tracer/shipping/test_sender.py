"""The sender over a real ZeroMQ socket: bounded exit with no repository, counted drops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import msgspec
import pytest
import zmq

import tracer
from invoseq import wire
from tests.tracer.core.implementations import needs_c_path
from tracer._core import budget, measured
from tracer._shipping.sender import IDLE_HEARTBEATS
from tracer._shipping.transport import MemoryTransport
from tracer.testing import capture


@tracer.traced
def work(n: int) -> int:
    return n * 2


def unused_endpoint(tmp_path: Path) -> str:
    """An ipc endpoint nobody listens on."""
    return f"ipc://{tmp_path}/nobody.sock"


@pytest.mark.timing
def test_shutdown_with_no_repository_returns_within_the_flush_timeout(tmp_path: Path) -> None:
    tracer.configure(endpoint=unused_endpoint(tmp_path), flush_timeout_ms=300)
    work(1)
    started = time.monotonic()
    acknowledged = tracer.shutdown()
    elapsed = time.monotonic() - started
    assert acknowledged is False
    assert elapsed < 0.3 + 5.0  # the timeout plus generous slack for a loaded machine


@pytest.mark.system
@pytest.mark.timing
def test_process_exit_with_no_repository_is_bounded(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            """
            import tracer

            @tracer.traced
            def handle(i):
                return i

            for i in range(1000):
                handle(i)
            print("done")
            """
        )
    )
    env = {
        "INVOSEQ_ENDPOINT": unused_endpoint(tmp_path),
        "INVOSEQ_FLUSH_TIMEOUT_MS": "500",
        "PATH": "/usr/bin:/bin",
    }
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    assert elapsed < 0.5 + 10.0  # flush timeout plus interpreter start-up, generously


SPOOLED_OR_COUNTED = """
import json, pathlib, sys
import tracer
from tracer._shipping import spool

@tracer.traced
def work(n):
    return n * 2

tracer.configure(
    endpoint=sys.argv[1],
    queue_batches=2,
    max_inflight_batches=1,
    batch_events=10,
    flush_timeout_ms=0,
    spool_dir=sys.argv[2],
    spool_bytes=4000,  # room for some batches only
)
for i in range(500):
    work(i)
tracer.shutdown()
stats = tracer.stats()
on_disk = [r.events for f in pathlib.Path(sys.argv[2]).iterdir() for r in spool.read_file(f)]
print(json.dumps({"stats": [stats.sent_events, stats.dropped_events, stats.spooled_events],
                  "on_disk": sum(on_disk)}))
"""


@pytest.mark.system
def test_without_a_repository_every_event_is_spooled_or_counted(tmp_path: Path) -> None:
    # In a process of its own: the count is the process's, and no other test's thread or
    # collected object may add an event to it.
    spool_dir = tmp_path / "spool"
    script = tmp_path / "spooled.py"
    script.write_text(SPOOLED_OR_COUNTED)
    env = {
        k: v for k, v in os.environ.items() if k == "INVOSEQ_PURE" or not k.startswith("INVOSEQ_")
    }
    done = subprocess.run(
        [sys.executable, str(script), unused_endpoint(tmp_path), str(spool_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    sent, dropped, spooled = report["stats"]
    [spool_file] = spool_dir.iterdir()
    assert sent == 0  # nothing was acknowledged: nobody listens
    assert dropped > 0  # the spool's bound was reached
    assert spooled > 0  # but it kept what it could, for the next run
    assert spooled + dropped == 1000  # a start and an end per call
    assert spool_file.stat().st_size <= 4000
    assert report["on_disk"] == spooled


def test_batches_are_numbered_bounded_and_carry_process_metadata() -> None:
    with capture(batch_events=64) as trace:
        for i in range(200):
            work(i)
        trace.flush()
        batches = list(trace.batches)
    numbers = [b.batch_no for b in batches]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # per process, in order
    assert all(wire.event_count(b) <= 64 for b in batches)
    # This thread's: a thread another test of the worker left in a traced call may add its End.
    [mine] = {t.tid for b in batches for t in b.threads if t.native_id == threading.get_native_id()}
    assert sum(len(c.events) for b in batches for c in b.chunks if c.tid == mine) == 400
    assert len({b.puid for b in batches}) == 1
    assert batches[0].process.pid > 0
    methods = [m for b in batches for m in b.methods]
    interned = [(m.module, m.qualname) for m in methods]
    assert interned.count((__name__, "work")) == 1  # interned once
    threads = [t for b in batches for t in b.threads if t.tid == mine]
    assert [t.name for t in threads] == [threading.current_thread().name]


def test_a_batch_past_the_repositorys_frame_limit_goes_as_several(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Big attributes make a batch of few events big: it is cut in halves until each fits the
    frame limit the repository enforces, and every event arrives."""
    limit = 40_000
    monkeypatch.setattr(wire, "MAX_FRAME_BYTES", limit)
    sizes: list[int] = []
    send = MemoryTransport.send

    def measured_send(self: MemoryTransport, body: bytes) -> bool:
        sizes.append(len(body))
        return send(self, body)

    monkeypatch.setattr(MemoryTransport, "send", measured_send)
    with capture(batch_events=100_000, flush_interval_ms=3_600_000) as trace:
        for i in range(40):
            call = measured.begin()
            assert call is not None
            call.finish(measured.method(__name__, "request"), {"body": f"{i:04}" * 1000})
        invocations = trace.invocations()
        dropped = tracer.stats().dropped_events
    assert len(sizes) >= 4  # 40 attributes of 4,000 characters: 160 kB
    assert max(sizes) <= limit
    assert sorted(int(str(i.attributes["body"])[:4]) for i in invocations if i.attributes) == [
        *range(40)
    ]
    assert all(i.status == "ok" for i in invocations)
    assert dropped == 0


def test_each_thread_gets_its_own_tid_and_ordered_events() -> None:
    def worker() -> None:
        for i in range(50):
            work(i)

    with capture() as trace:
        threads = [threading.Thread(target=worker, name=f"w{i}") for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        invocations = trace.invocations()
    by_thread: dict[str, int] = {}
    for invocation in invocations:
        by_thread[invocation.thread_name] = by_thread.get(invocation.thread_name, 0) + 1
    assert by_thread == {"w0": 50, "w1": 50, "w2": 50}
    assert len({i.tid for i in invocations}) == 3


@pytest.mark.system
def test_acknowledged_by_a_real_router(tmp_path: Path) -> None:
    """The sender's half of the protocol against a bare ROUTER socket standing in for cmr."""
    endpoint = f"ipc://{tmp_path}/router.sock"
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.bind(endpoint)
    received: list[wire.Batch] = []
    stop = threading.Event()
    decoder = msgspec.msgpack.Decoder(wire.Batch)
    encoder = msgspec.msgpack.Encoder()

    def serve() -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        while not stop.is_set():
            if poller.poll(20):
                identity, head, body = router.recv_multipart()
                assert head == wire.BATCH_HEADER
                batch = decoder.decode(body)
                received.append(batch)
                ack = wire.Ack(batch.puid, batch.batch_no)
                router.send_multipart([identity, wire.ACK_HEADER, encoder.encode(ack)])

    server = threading.Thread(target=serve, name="test-router")
    server.start()
    try:
        tracer.configure(endpoint=endpoint, flush_timeout_ms=10_000)
        for i in range(10):
            work(i)
        assert tracer.shutdown() is True
    finally:
        stop.set()
        server.join(10)
        router.close(linger=0)
        context.term()
    assert sum(wire.event_count(b) for b in received) == 20
    assert received[-1].final is True
    assert tracer.stats().acked_batches == len(received)


@needs_c_path  # pure Python's events are the program's tuples until they are sent
@pytest.mark.system
def test_batches_awaiting_acknowledgement_are_not_the_programs_allocations(tmp_path: Path) -> None:
    """As more-itertools' memory test does: tracemalloc started after the tracer, many traced
    calls, and the sender drains during the measurement. Its encoded batches wait in memory for
    the repository's acknowledgement; tracemalloc must not count them as the program's."""
    endpoint = f"ipc://{tmp_path}/router.sock"
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)  # a repository that receives and does not answer yet
    router.bind(endpoint)
    try:
        # No drain but the ones asked for, no sampler; a flush does not wait for acknowledgements.
        tracer.configure(
            endpoint=endpoint,
            flush_interval_ms=3_600_000,
            heartbeat_ms=3_600_000,
            sample_interval_ms=0,
            flush_timeout_ms=0,
            spool_bytes=0,
        )
        work(0)  # the thread's buffer exists, the method is interned
        while not router.poll(100):  # the connection is up: later batches go out at once
            tracer.flush(0)  # sent; no acknowledgement to wait for (none will come)
        router.recv_multipart()
        calls = 20_000
        tracemalloc.start()
        try:
            for i in range(calls):
                work(i)
            # Drained, encoded and sent, never acknowledged: the flush asks for it and does not
            # wait for acknowledgements that will not come; the batches' arrival says it is done.
            assert tracer.flush(0) is False
            received = 0  # ZeroMQ delivers them on its own thread
            while received < 2 * calls and router.poll(30_000):
                received += wire.event_count(
                    msgspec.msgpack.decode(router.recv_multipart()[2], type=wire.Batch)
                )
            retained, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert received >= 2 * calls  # (a thread another test left in a call may add its End)
        assert tracer.stats().acked_batches == 0
    finally:
        tracer.shutdown(timeout_s=5)
        router.close(linger=0)
        context.term()
    # 1.4 MB of batches before they were hidden from it; what is left is a few hundred bytes
    # a batch in flight (the objects that hold each body)
    assert retained < 64 * 1024, retained


def test_an_idle_tracer_sends_heartbeats_that_name_their_interval() -> None:
    with capture(heartbeat_ms=20, flush_interval_ms=10) as trace:
        work(1)
        trace.flush()
        sent = len(trace.batches)
        deadline = time.monotonic() + 30
        while len(trace.batches) < sent + 3 and time.monotonic() < deadline:
            threading.Event().wait(0.01)  # bounded poll: heartbeats arrive on their own
        heartbeats = trace.batches[sent:]
    assert len(heartbeats) >= 3
    assert all(wire.event_count(b) == 0 for b in heartbeats[:3])
    # Once idle (nothing in flight, no call open), a heartbeat promises a longer silence.
    assert trace.batches[0].process.heartbeat_ms == 20
    assert {b.process.heartbeat_ms for b in trace.batches} <= {20, 20 * IDLE_HEARTBEATS}


def test_a_program_faster_than_the_sender_stays_bounded_and_every_call_is_counted(
    tmp_path: Path,
) -> None:
    tracer.configure(
        endpoint=unused_endpoint(tmp_path),
        max_buffered_bytes=200 * budget.EVENT_BYTES,  # room for 200 buffered events
        queue_batches=1,
        batch_events=50,
        spool_bytes=0,  # nothing can keep what the repository does not take
        flush_timeout_ms=0,
    )
    most = 0
    calls = 20_000
    for i in range(calls):
        work(i)
        if i % 100 == 0:
            most = max(most, tracer.stats().buffered_events)
    tracer.shutdown()
    stats = tracer.stats()
    assert most <= 200 + 2  # the cap (a call in flight may add its End)
    assert stats.sent_events == 0  # nobody listens
    assert stats.dropped_events == 2 * calls  # recorded and dropped, or never recorded: counted

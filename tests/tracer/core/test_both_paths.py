"""Both hot-path implementations side by side, in subprocesses: byte-identical batches on the
wire, and a forked child that starts afresh."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from invoseq import wire
from tests.support import write_script
from tests.tracer.core.implementations import RAW_TRANSPORT, needs_c_build, run

# -- both implementations side by side ---------------------------------------------------------

DETERMINISTIC_PROGRAM = (
    """
import asyncio, itertools, json, threading
import msgspec
import tracer
from tracer._core import context, decorator, handoff, hooks, ids
from invoseq import wire
from tracer import _runtime as runtime

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

"""
    + RAW_TRANSPORT
    + """
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

@tracer.traced
def closing(n):
    try:
        while True:
            try:
                yield leaf(n)
            except KeyError:
                leaf(-n)
    finally:
        leaf(n * 10)

@tracer.traced
def delegating():
    try:
        yield from closing(7)
    finally:
        leaf(70)

@tracer.traced
async def async_rows():
    try:
        while True:
            try:
                yield leaf(1)
            except KeyError:
                leaf(-1)
    finally:
        leaf(10)

async def leave_async_rows():
    rows = async_rows()
    await rows.__anext__()
    await rows.athrow(KeyError("k"))
    await rows.aclose()

@tracer.traced
async def cancelled():
    try:
        await asyncio.sleep(3600)
    finally:
        leaf(8)

async def cancel_one(coroutine):
    task = asyncio.ensure_future(coroutine)
    await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass

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
    for _ in closing(4):  # closed as the loop is left: its finally's call is its own
        break
    rows = closing(6)
    next(rows)
    rows.throw(KeyError("k"))  # the except clause's call is the generator's
    rows.close()
    rows = delegating()
    next(rows)
    rows.throw(KeyError("k"))  # through the yield from, into closing's except clause
    rows.close()
    asyncio.run(leave_async_rows())
    asyncio.run(coroutine())
    asyncio.run(cancel_one(cancelled()))  # a cancelled coroutine's finally
    Shop().price()
    handoff.record("thread", leaf)
    worker = threading.Thread(target=leaf, args=(5,), name="worker")
    worker.start()
    worker.join()
    dropped = numbers(5)
    next(dropped)
    del dropped  # left suspended (3.13 closes it with no event): the sweep ends it
    hooks.sweep()
    token = context.current.set((b"short", 99, 0))  # a context no record layout fits
    try:
        leaf(2)
        list(numbers(2))  # a strand in it sets its own value, with that sequence, at each step
    finally:
        context.current.reset(token)

tracer.configure(
    flush_interval_ms=3_600_000, heartbeat_ms=3_600_000, batch_events=5, spool_bytes=0,
    sample_interval_ms=0,
)
root()
leaf(3)
list(numbers(2))  # a strand that roots its sequence: it sets its own value at each step
assert runtime.flush(30)
tracer.shutdown(30)
print(json.dumps({"implementation": decorator.IMPLEMENTATION, "bodies": bodies}))
"""
)


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
    long_name = ("Ünïcode" + "e" * 1100)[: wire.MAX_NAME]
    assert errors == ["ValueError", long_name, "KeyError", "CancelledError"]


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

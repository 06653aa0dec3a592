"""Fixtures for repository tests: wire batches built the way a traced process sends them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import msgspec
import pytest

from invoseq import wire

#: Wall clock minus monotonic clock of the test processes: stored times are event times plus this.
CLOCK_OFFSET_NS = 1_700_000_000_000_000_000

BatchFactory = Callable[..., wire.Batch]


def make_batch(
    puid: int,
    batch_no: int,
    events_by_tid: Mapping[int, Iterable[wire.Event]],
    *,
    methods: Mapping[int, str] | None = None,
    final: bool = False,
    dropped: int = 0,
    clock_offset_ns: int = CLOCK_OFFSET_NS,
    pid: int = 4242,
    host: str = "testhost",
    argv: Iterable[str] = ("app.py", "--fast"),
    heartbeat_ms: int = 0,
    frames: Iterable[wire.FrameInfo] = (),
    samples: Iterable[wire.Sample] = (),
    sampler: wire.SamplerReport | None = None,
    lost_seqs: Iterable[bytes] = (),
    lost_windows: Iterable[tuple[int, int]] = (),
) -> wire.Batch:
    """A batch from process ``puid``. ``methods`` maps method ids to ``module.qualname``; by
    default every method a Start or Handoff uses is described as ``app.m<id>``. Every tid gets a
    ThreadInfo. ``frames``, ``samples`` and ``sampler`` are the stack sampler's part;
    ``lost_seqs`` the sequences the process reports it dropped events of, ``lost_windows`` the
    (first, last) event times of its drops whose sequences it could not name."""
    chunks = [wire.ThreadChunk(tid, list(events)) for tid, events in events_by_tid.items()]
    if methods is None:
        used = {
            e.method for c in chunks for e in c.events if isinstance(e, wire.Start | wire.Handoff)
        }
        methods = {method: f"app.m{method}" for method in sorted(used)}
    infos = []
    for method, name in methods.items():
        module, _, qualname = name.rpartition(".")
        infos.append(wire.MethodInfo(method, module, qualname, f"/src/{module}.py", 10 + method))
    return wire.Batch(
        puid=puid,
        batch_no=batch_no,
        process=wire.ProcessInfo(
            pid=pid,
            host=host,
            platform_id="platform-1",
            clock_offset_ns=clock_offset_ns,
            started_ns=clock_offset_ns,
            argv=list(argv),
            heartbeat_ms=heartbeat_ms,
        ),
        methods=infos,
        threads=[wire.ThreadInfo(tid, 1000 + tid, f"thread-{tid}") for tid in events_by_tid],
        chunks=chunks,
        dropped=dropped,
        final=final,
        frames=list(frames),
        samples=list(samples),
        sampler=sampler,
        lost_seqs=list(lost_seqs),
        lost_windows=[wire.LostWindow(first, last) for first, last in lost_windows],
    )


class FakeClock:
    """A wall clock that moves only when a test says so: ``clock.now_ns += ...``."""

    def __init__(self, now_ns: int = CLOCK_OFFSET_NS) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns


def encode_batch(batch: wire.Batch) -> list[bytes]:
    """The two frames a traced process sends for ``batch``."""
    return [wire.BATCH_HEADER, msgspec.msgpack.encode(batch)]


@pytest.fixture(name="make_batch")
def fixture_make_batch() -> BatchFactory:
    """``make_batch(puid, batch_no, {tid: [events]}, methods=..., final=..., dropped=...,
    pid=..., host=..., heartbeat_ms=..., lost_seqs=..., lost_windows=...)``."""
    return make_batch


@pytest.fixture(name="clock")
def fixture_clock() -> FakeClock:
    """The clock a store reads with (``open_store(..., clock=clock)``), starting at the clock
    offset ``make_batch`` uses."""
    return FakeClock()


@pytest.fixture(name="clock_offset_ns")
def fixture_clock_offset_ns() -> int:
    """The clock offset ``make_batch`` gives its process: stored time = event time + this."""
    return CLOCK_OFFSET_NS


@pytest.fixture(name="encode_batch")
def fixture_encode_batch() -> Callable[[wire.Batch], list[bytes]]:
    """``encode_batch(batch) -> [header, body]``, the frames a DEALER sends."""
    return encode_batch

"""The contract for stack samples, run against each backend: samples are stored per thread and
time, and a sequence reads back those overlapping its invocations' windows on its threads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from cmr.store import (
    FrameRecord,
    InvalidBatchError,
    SampleRecord,
    SamplerRecord,
    Store,
    StoreError,
    open_store,
)
from cmr.store.sqlite.schema import SCHEMA_VERSION
from cmr.store.sqlite.statements import SAMPLES_IN_WINDOW
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import older_schema, seq_id, start, user_version

BatchFactory = Callable[..., wire.Batch]
S = seq_id("5a")
OTHER = seq_id("07")
OFFSET = 1_700_000_000_000_000_000  # make_batch's clock offset: stored time = t_ns + this


def sample(
    t_ns: int,
    *,
    tid: int = 1,
    duration: int = 100,
    weight: int = 1,
    cpu: int = 0,
    frames: tuple[int, ...] = (1,),
    lines: tuple[int, ...] | None = None,
) -> wire.Sample:
    executing = list(lines) if lines is not None else [0] * len(frames)
    return wire.Sample(tid, t_ns, weight, duration, cpu, list(frames), executing)


def times(store: Store, seq: bytes) -> list[tuple[int, int]]:
    """(tid, event-clock time) of the samples the sequence reads, in the order returned."""
    return [(s.tid, s.t_ns - OFFSET) for s in store.load_sequence(seq).samples]


def test_samples_and_their_frames_round_trip_in_wall_clock_time(
    store: Store, make_batch: BatchFactory
) -> None:
    frames = [
        wire.FrameInfo(1, "/src/app.py", "main", 5),
        wire.FrameInfo(2, "/src/app.py", "Cart.total", 15),
        wire.FrameInfo(3, "/src/unused.py", "never", 1),
    ]
    events = {1: [start(1, 100, S), wire.End(1, 1_000)]}
    taken = sample(200, frames=(1, 2), lines=(7, 16), duration=100, cpu=40)
    store.ingest(make_batch(7, 1, events, frames=frames, samples=[taken]), 1)

    data = store.load_sequence(S)

    assert data.samples == [SampleRecord(7, 1, OFFSET + 200, 1, 100, 40, (1, 2), (7, 16))]
    assert data.frames == {  # only the frames its samples use
        (7, 1): FrameRecord("/src/app.py", "main", 5),
        (7, 2): FrameRecord("/src/app.py", "Cart.total", 15),
    }


def test_a_samples_ticks_round_trip_and_a_sample_without_them_reads_as_unknown(
    store: Store, make_batch: BatchFactory
) -> None:
    """The sampler says when a sample's first and last ticks saw its stack (offsets from its
    start); a tracer that predates them sends none."""
    events = {1: [start(1, 100, S), wire.End(1, 1_000)]}
    collapsed = wire.Sample(1, 200, 9, 500, 0, [1], [0], 30, 470)
    older = wire.Sample(1, 700, 1, 100, 0, [1], [0])
    store.ingest(make_batch(7, 1, events, samples=[collapsed, older]), 1)

    data = store.load_sequence(S)

    assert [s.ticks for s in data.samples] == [(OFFSET + 230, OFFSET + 670), None]


def test_a_sequence_reads_the_samples_overlapping_its_windows_on_its_threads(
    store: Store, make_batch: BatchFactory
) -> None:
    events = {
        1: [start(1, 1_000, S), wire.End(1, 2_000), start(2, 3_000, OTHER), wire.End(2, 4_000)],
        2: [start(3, 1_200, OTHER), wire.End(3, 1_800)],
    }
    samples = [
        sample(500, duration=400),  # ends at 900, before the window
        sample(800, duration=300),  # ends at 1_100, inside
        sample(1_500, duration=0),  # an instant inside
        sample(1_999, duration=0),  # the last instant of the window
        sample(2_000, duration=10),  # starts as the window ends
        sample(3_500),  # in the other sequence's window on the same thread
        sample(1_500, tid=2),  # the same time on a thread the sequence never ran on
    ]
    store.ingest(make_batch(7, 1, events, samples=samples), 1)
    store.ingest(make_batch(8, 1, {}, samples=[sample(1_500)]), 1)  # another process's thread 1

    assert times(store, S) == [(1, 800), (1, 1_500), (1, 1_999)]
    assert times(store, OTHER) == [(1, 3_500), (2, 1_500)]


def test_a_collapsed_sample_reaching_into_a_window_is_read_once(
    store: Store, make_batch: BatchFactory
) -> None:
    events = {
        1: [start(1, 10_000, S), wire.End(1, 11_000), start(2, 20_000, S), wire.End(2, 21_000)]
    }
    idle = sample(0, weight=500, duration=10_500)  # from long before into the first call
    both = sample(10_900, weight=20, duration=9_200)  # from the first call into the second
    store.ingest(make_batch(7, 1, events, samples=[idle, both, sample(15_000)]), 1)

    loaded = store.load_sequence(S).samples

    assert [(s.t_ns - OFFSET, s.weight, s.duration_ns) for s in loaded] == [
        (0, 500, 10_500),
        (10_900, 20, 9_200),
    ]


def test_a_sequence_reads_its_processes_sampler_gaps_apart_from_its_samples(
    store: Store, make_batch: BatchFactory
) -> None:
    """A gap (``invoseq.wire.GAP_TID``: no frames; the sampler read no thread) belongs to the
    process, not a thread: a sequence reads those overlapping any of its calls there, even on a
    thread the sampler never read."""
    events = {
        1: [start(1, 1_000, S), wire.End(1, 2_000)],
        2: [start(2, 5_000, S), wire.End(2, 6_000)],  # a thread never sampled
    }
    gaps = [
        sample(500, tid=0, duration=300, weight=3, frames=()),  # ends before the sequence
        sample(1_500, tid=0, duration=2_000, weight=20, frames=()),  # from one call to between
        sample(5_500, tid=0, duration=100, weight=1, frames=()),  # inside the second call
        sample(9_000, tid=0, duration=100, weight=1, frames=()),  # after the sequence
    ]
    store.ingest(make_batch(7, 1, events, samples=[*gaps, sample(1_200)]), 1)
    store.ingest(make_batch(8, 1, {}, samples=[sample(1_500, tid=0, frames=())]), 1)

    data = store.load_sequence(S)

    assert [(s.tid, s.t_ns - OFFSET) for s in data.samples] == [(1, 1_200)]
    assert [(g.puid, g.t_ns - OFFSET, g.duration_ns, g.weight) for g in data.gaps] == [
        (7, 1_500, 2_000, 20),
        (7, 5_500, 100, 1),
    ]
    assert store.stats().samples == 1  # `cmr stats` counts the threads' samples, not gaps


def test_an_open_invocation_reads_every_later_sample_of_its_thread(
    store: Store, make_batch: BatchFactory
) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 1_000, S)]}), 1)
    store.ingest(make_batch(7, 2, {}, samples=[sample(900, duration=200), sample(5_000)]), 2)
    store.ingest(make_batch(7, 3, {}, samples=[sample(10**12), sample(800)]), 3)

    assert times(store, S) == [(1, 900), (1, 5_000), (1, 10**12)]


def test_a_tree_without_samples_does_not_read_them(store: Store, make_batch: BatchFactory) -> None:
    frames = [wire.FrameInfo(1, "/src/app.py", "main", 5)]
    events = {1: [start(1, 100, S), wire.End(1, 1_000)]}
    store.ingest(make_batch(7, 1, events, frames=frames, samples=[sample(200)]), 1)

    data = store.load_sequence(S, samples=False)

    assert (data.samples, data.frames) == ([], {})
    assert len(store.load_sequence(S).samples) == 1


def test_the_first_sample_of_a_thread_and_time_wins_and_counts_once(
    store: Store, make_batch: BatchFactory
) -> None:
    events = {1: [start(1, 100, S), wire.End(1, 1_000)]}
    store.ingest(make_batch(7, 1, events, samples=[sample(200, cpu=1), sample(300)]), 1)
    store.ingest(make_batch(7, 2, {}, samples=[sample(200, cpu=99), sample(400)]), 2)

    loaded = store.load_sequence(S).samples

    assert [(s.t_ns - OFFSET, s.cpu_ns) for s in loaded] == [(200, 1), (300, 0), (400, 0)]
    assert store.stats().samples == 3


def test_lines_are_cut_or_padded_to_one_per_frame(store: Store, make_batch: BatchFactory) -> None:
    events = {1: [start(1, 100, S), wire.End(1, 1_000)]}
    short = sample(200, frames=(1, 2, 3), lines=(4,))
    long = sample(300, frames=(1,), lines=(4, 5, 6))
    store.ingest(make_batch(7, 1, events, samples=[short, long]), 1)

    assert [s.lines for s in store.load_sequence(S).samples] == [(4, 0, 0), (4,)]


def test_a_batch_whose_sample_time_overflows_is_refused_whole(
    store: Store, make_batch: BatchFactory
) -> None:
    events = {1: [start(1, 100, S)]}
    too_late = sample(2**63 - 1 - OFFSET - 10, duration=100)

    with pytest.raises(InvalidBatchError, match="sample time out of range"):
        store.ingest(make_batch(7, 1, events, samples=[too_late]), 1)

    assert store.list_sequences(10) == []
    assert store.stats().samples == 0


def test_stats_count_samples_and_keep_each_process_latest_sampler_report(
    store: Store, make_batch: BatchFactory
) -> None:
    later = wire.SamplerReport("cpu", 10, 500, 3, 9_000_000, 12_000_000, 25_000_000, 40)
    earlier = wire.SamplerReport("cpu", 10, 400, 1, 7_000_000, 25_000_000, 25_000_000, 2)
    store.ingest(make_batch(7, 2, {}, samples=[sample(1), sample(2)], sampler=later), 1)
    store.ingest(make_batch(7, 1, {}, sampler=earlier), 2)  # arrives late: older numbers
    store.ingest(make_batch(8, 1, {}, samples=[sample(1)]), 3)

    stats = store.stats()

    assert stats.samples == 3
    assert stats.samplers == {
        7: SamplerRecord("cpu", 10, 500, 3, 9_000_000, 12_000_000, 25_000_000, 40)
    }


def test_a_sampler_report_from_a_tracer_that_predates_pacing_reads_as_unpaced(
    store: Store, make_batch: BatchFactory
) -> None:
    older = wire.SamplerReport("wall", 10, 500, 3, 9_000_000)  # the fields it never sent: 0
    store.ingest(make_batch(7, 1, {}, samples=[sample(1)], sampler=older), 1)

    report = store.stats().samplers[7]

    assert (
        report.interval_ms,
        report.current_interval_ns,
        report.longest_interval_ns,
        report.dropped_samples,
    ) == (10, 0, 0, 0)


def test_sequences_holding_a_method_are_found_most_recent_first(
    store: Store, make_batch: BatchFactory
) -> None:
    first, second, third = seq_id("a1"), seq_id("a2"), seq_id("a3")
    events = {
        1: [
            start(1, 100, first, method=1),
            start(2, 110, first, parent=1, method=2),
            start(3, 200, second, method=1),
            start(4, 300, third, method=3),
            start(5, 310, third, parent=4, method=2),
        ]
    }
    names = {1: "shop.handle", 2: "shop.cart.total", 3: "jobs.run"}  # module shop.cart
    store.ingest(make_batch(7, 1, events, methods=names), 1)

    assert store.find_sequences("shop.cart.total", since_ns=None, limit=10) == [third, first]
    assert store.find_sequences("total", since_ns=None, limit=10) == [third, first]  # qualname
    assert store.find_sequences("cart.total", since_ns=None, limit=10) == []
    assert store.find_sequences("shop.handle", since_ns=None, limit=1) == [second]
    assert store.find_sequences("total", since_ns=OFFSET + 150, limit=10) == [third]
    assert store.find_sequences("nowhere", since_ns=None, limit=10) == []
    with pytest.raises(StoreError, match="limit must be 0 or more"):
        store.find_sequences("total", since_ns=None, limit=-1)


def test_an_upgraded_repository_stores_samples(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = str(tmp_path / "cmr.sqlite")
    older_schema(path, 3)

    store = open_store(path, clock=clock)
    try:
        events = {1: [start(1, 100, S), wire.End(1, 1_000)]}
        report = wire.SamplerReport("wall", 10, 5, 0, 100)
        store.ingest(make_batch(8, 1, events, samples=[sample(200)], sampler=report), 1)
        assert times(store, S) == [(1, 200)]
        assert (store.stats().samples, list(store.stats().samplers)) == (1, [8])
    finally:
        store.close()
    assert user_version(path) == SCHEMA_VERSION


def test_a_window_reads_its_samples_by_index_range(tmp_path: Path) -> None:
    path = str(tmp_path / "cmr.sqlite")
    open_store(path).close()
    params = {"puid": 1, "tid": 1, "lowest": 0, "start": 1, "end": 2}
    with sqlite3.connect(path) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {SAMPLES_IN_WINDOW}", params)]
    conn.close()

    assert plan == ["SEARCH samples USING PRIMARY KEY (puid=? AND tid=? AND t_ns>? AND t_ns<?)"]

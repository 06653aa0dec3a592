"""The C handlers' table of open strands (``_speedups.StrandTable``): every traced generator
started and not finished is in it, by its frame's key (its frame object on 3.12+, its
interpreter frame's address on 3.11: ``_speedups.strand_key_of``), with a state of its own,
through many starts and ends in any order (its entries probed for, and moved back as others
leave); each one that finishes leaves it, its End recorded."""

from __future__ import annotations

import random
from collections.abc import Iterator

import tracer
from tests.tracer.core.implementations import needs_c_path
from tracer._core import accel, hooks
from tracer.testing import capture

GENERATORS = 3_000


@tracer.traced
def pair(n: int) -> Iterator[int]:
    yield n
    yield n + 1


def started(first: int, count: int) -> list[tuple[int, Iterator[int]]]:
    generators = [(n, pair(n)) for n in range(first, first + count)]
    for n, generator in generators:
        assert next(generator) == n
    return generators


@needs_c_path
def test_the_table_holds_exactly_the_open_strands_through_many_starts_and_ends() -> None:
    rng = random.Random(69)
    with capture(sample_interval_ms=0) as trace:
        assert type(hooks._strands).__name__ == "StrandTable"
        key_of = accel.speedups.strand_key_of  # type: ignore[union-attr]
        before = {frame for frame, _ in hooks._strands.items()}
        open_ = started(0, GENERATORS)
        finished = 0
        for round_ in range(1, 5):  # a third of those open finish, in any order; more start
            rng.shuffle(open_)
            cut = len(open_) // 3
            for n, generator in open_[:cut]:
                assert list(generator) == [n + 1]
            finished += cut
            open_ = open_[cut:] + started(round_ * GENERATORS, GENERATORS // 4)
            mine = {frame: state for frame, state in hooks._strands.items() if frame not in before}
            assert set(mine) == {key_of(generator) for _, generator in open_}
            assert len({state.iid for state in mine.values()}) == len(open_)
        for n, generator in open_:
            assert list(generator) == [n + 1]
        assert not {frame for frame, _ in hooks._strands.items()} - before
        trace.flush()
        ended = [i for i in trace.invocations() if i.name.endswith(".pair")]
    assert len(ended) == finished + len(open_)
    assert {i.status for i in ended} == {"ok"}


@needs_c_path
def test_a_burst_of_open_strands_leaves_no_table_its_size_behind() -> None:
    # A server that once held 20,000 suspended generators (a burst of slow streaming responses)
    # and then finished them keeps a table for the strands it has open now, not for that peak.
    with capture(sample_interval_ms=0) as trace:
        open_ = started(0, 20_000)
        assert hooks._strands.capacity >= 2 * len(open_)
        for n, generator in open_:
            assert list(generator) == [n + 1]
        assert hooks._strands.capacity <= max(64, 8 * len(hooks._strands))
        trace.flush()
        ended = [i for i in trace.invocations() if i.name.endswith(".pair")]
    assert len(ended) == len(open_)  # every End recorded, the table resized under them

"""Every estimated node says where it can have started and ended (``Node.bounds``): ordered
(start_min <= start_max <= end_min <= end_max), and the truth is inside. Checked against
workloads whose frames ran at known times, sampled as the sampler samples: a tick sees the
stack; a sample starts where the stack changed, somewhere between two ticks, and lasts until
the next one starts; consecutive ticks of an idle thread that saw the same stack are one
sample of their weight; and each sample says when its first and last ticks were."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from cmr.views.model import Bounds, Node, walk
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import SequenceBuilder

MS = 1_000_000
CALL_END = 1_000 * MS


def estimated(tree_root: Node) -> dict[str, Node]:
    return {node.name: node for node, _ in walk(tree_root) if node.kind == "estimated"}


def ordered(bounds: Bounds) -> bool:
    end_max = bounds.end_max_ns if bounds.end_max_ns is not None else 2**63 - 1
    return bounds.start_min_ns <= bounds.start_max_ns <= bounds.end_min_ns <= end_max


def jittered_ticks(rng: random.Random, interval: int, phase: int, end: int) -> list[int]:
    """Ticks from ``phase`` to ``end``, each 0.5 to 2 intervals after the last (the sampler
    thread jitters between 0.5 and 1.5; the main thread's ticks are capped at 2)."""
    ticks, tick = [], phase
    while tick < end:
        ticks.append(tick)
        tick += rng.randrange(interval // 2, 2 * interval + 1)
    return ticks


def sampled(
    b: SequenceBuilder,
    ticks: list[int],
    stacks: list[tuple[int, ...]],
    idle: list[bool],
    splits: list[int],
    *,
    send_ticks: bool = True,
) -> None:
    """Samples of ``ticks``, at which the thread showed ``stacks``: consecutive ticks that saw
    the same stack while the thread was ``idle`` are one sample of their weight; a sample starts
    ``splits[k] %`` of the way from the previous sample's last tick to its first (where the
    sampler placed the change), and lasts until the next one starts."""
    groups: list[list[int]] = []  # tick indices
    for k, stack in enumerate(stacks):
        if groups and idle[k] and stacks[groups[-1][-1]] == stack:
            groups[-1].append(k)
        else:
            groups.append([k])
    starts = []
    for g, group in enumerate(groups):
        first = ticks[group[0]]
        if g == 0:
            starts.append(first)
            continue
        before = ticks[groups[g - 1][-1]]
        starts.append(before + (first - before) * splits[g % len(splits)] // 100)
    for g, group in enumerate(groups):
        last = ticks[group[-1]]
        end = starts[g + 1] if g + 1 < len(groups) else last + (ticks[1] - ticks[0])
        b.sample(
            starts[g],
            list(stacks[group[0]]),
            weight=len(group),
            duration=end - starts[g],
            ticks=(ticks[group[0]], last) if send_ticks else None,
        )


def handle_with_work() -> SequenceBuilder:
    b = SequenceBuilder()
    b.call("app.handle", 1, start=0, end=CALL_END, line=10)
    b.frame(1, "handle", line=10)
    b.frame(2, "work", line=20)
    b.frame(3, "wait", line=30)
    return b


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    interval=st.sampled_from([1 * MS, 5 * MS, 10 * MS]),
    phase=st.integers(0, 9 * MS),
    start=st.integers(1 * MS, 800 * MS),
    length=st.integers(0, 150 * MS),
    idle=st.booleans(),
    splits=st.lists(st.integers(1, 100), min_size=1, max_size=5),
)
def test_the_bounds_contain_where_the_frame_really_ran_within_a_tick_either_side(
    *, seed: int, interval: int, phase: int, start: int, length: int, idle: bool, splits: list[int]
) -> None:
    """``work`` ran in [start, end) inside ``handle``, which otherwise waited in ``wait``
    (collapsed when ``idle``, and ``work`` too): its bounds hold that truth, in order, and each
    window is the gap between two ticks."""
    b = handle_with_work()
    end = start + length
    ticks = jittered_ticks(random.Random(seed), interval, phase % interval, CALL_END)
    stacks = [(1, 2) if start <= tick < end else (1, 3) for tick in ticks]
    sampled(b, ticks, stacks, [idle] * len(ticks), splits)
    data = b.data()
    found = estimated(merge_samples(build_tree(data), data).root)
    if not any(start <= tick < end for tick in ticks):  # between two ticks: never invented
        assert "work" not in found
        return
    bounds = found["work"].bounds
    assert bounds is not None
    assert ordered(bounds), bounds
    assert bounds.start_min_ns <= start <= bounds.start_max_ns
    assert bounds.end_max_ns is not None
    assert bounds.end_min_ns <= end <= bounds.end_max_ns
    longest_gap = max(b - a for a, b in itertools.pairwise(ticks))
    assert bounds.start_max_ns - bounds.start_min_ns <= longest_gap
    assert bounds.end_max_ns - bounds.end_min_ns <= longest_gap
    # The stretches it waited in, collapsed or not, are known as closely.
    wait = found["wait"].bounds
    assert wait is not None
    assert ordered(wait), wait
    assert wait.start_max_ns - wait.start_min_ns <= max(longest_gap, ticks[0])


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    interval=st.sampled_from([1 * MS, 10 * MS]),
    child=st.none() | st.tuples(st.integers(0, 900 * MS), st.integers(0, 100 * MS)),
    send_ticks=st.booleans(),
    splits=st.lists(st.integers(1, 100), min_size=1, max_size=5),
)
def test_bounds_are_ordered_whatever_the_samples_show(
    *,
    seed: int,
    interval: int,
    child: tuple[int, int] | None,
    send_ticks: bool,
    splits: list[int],
) -> None:
    """Random stacks at random ticks, idle or not, around a measured child or not, with ticks
    sent or not (a tracer that predates them): every estimated node's bounds are ordered and
    inside its measured caller."""
    rng = random.Random(seed)
    b = handle_with_work()
    b.frame(4, "inner", line=40)
    if child is not None:
        b.call("app.inner", 2, 1, start=child[0], end=child[0] + child[1], line=40)
    ticks = jittered_ticks(rng, interval, rng.randrange(interval), CALL_END)
    shapes = [(1,), (1, 2), (1, 3), (1, 2, 3), (1, 3, 2)]
    stacks: list[tuple[int, ...]] = []
    for tick in ticks:
        if rng.random() < 0.2 or not stacks:
            stacks.append(rng.choice(shapes))
        else:
            stacks.append(stacks[-1])
        if child is not None and child[0] <= tick < child[0] + child[1]:
            stacks[-1] = (1, 4, *stacks[-1][1:])
    idle = [rng.random() < 0.7 for _ in ticks]
    sampled(b, ticks, stacks, idle, splits, send_ticks=send_ticks)
    data = b.data()
    root = merge_samples(build_tree(data), data).root
    for node, _depth in walk(root):
        if node.kind != "estimated":
            continue
        assert node.bounds is not None
        assert ordered(node.bounds), (node.name, node.bounds)


def test_a_collapsed_wait_is_bounded_by_its_first_and_last_ticks() -> None:
    """Spin, sleep, spin at 10 ms ticks: the sleep's 90 ticks are one sample, and its bounds
    (as the spins' next to it) are a tick wide at each end, not the whole sleep."""
    b = handle_with_work()
    b.frame(5, "tidy", line=50)
    ticks = list(range(5 * MS, 300 * MS, 10 * MS))
    stacks = [(1, 2) if t < 180 * MS else (1, 3) if t < 270 * MS else (1, 5) for t in ticks]
    sampled(b, ticks, stacks, [stack == (1, 3) for stack in stacks], [50])
    data = b.data()
    [wait_sample] = [s for s in data.samples if s.weight > 1]
    assert wait_sample.weight == 9
    found = estimated(merge_samples(build_tree(data), data).root)
    assert found["work"].bounds == Bounds(0, 5 * MS, 175 * MS, 185 * MS)
    assert found["wait"].bounds == Bounds(175 * MS, 185 * MS, 265 * MS, 275 * MS)
    assert found["tidy"].bounds == Bounds(265 * MS, 275 * MS, 295 * MS, CALL_END)


def test_a_frame_of_a_call_still_running_has_no_end_bound_past_the_last_sample() -> None:
    b = SequenceBuilder()
    b.call("app.handle", 1, start=0, line=10)  # running
    b.frame(1, "handle", line=10)
    b.frame(2, "work", line=20)
    b.sample(10 * MS, [1], duration=10 * MS, ticks=(15 * MS, 15 * MS))
    b.sample(20 * MS, [1, 2], duration=10 * MS, ticks=(25 * MS, 25 * MS))
    data = b.data()
    bounds = estimated(merge_samples(build_tree(data), data).root)["work"].bounds
    assert bounds == Bounds(15 * MS, 25 * MS, 25 * MS, None)  # it may still be running
    assert bounds.spread_ns() is None


def test_without_ticks_a_sample_counts_as_its_span_and_the_bounds_stay_ordered() -> None:
    """Samples from a tracer that predates ticks: a sample is taken to have run throughout
    its span (as its time is), and the windows reach the samples before and after."""
    b = SequenceBuilder()
    b.call("app.handle", 1, start=0, line=10)
    b.frame(1, "handle", line=10)
    b.frame(2, "work", line=20)
    b.sample(10 * MS, [1], duration=10 * MS)
    b.sample(20 * MS, [1, 2], duration=10 * MS)
    b.sample(30 * MS, [1], duration=10 * MS)
    data = b.data()
    bounds = estimated(merge_samples(build_tree(data), data).root)["work"].bounds
    assert bounds == Bounds(10 * MS, 20 * MS, 30 * MS - 1, 40 * MS - 1)

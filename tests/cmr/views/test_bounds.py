"""Every estimated node says where it can have started and ended (``Node.bounds``), and the
truth is inside: checked against workloads whose frames ran at known times, sampled as the
sampler samples (a tick sees the stack; a sample starts where the stack changed, somewhere
between two ticks, and lasts until the next one starts)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cmr.views.calltree import build_tree
from cmr.views.merge import merge_samples
from cmr.views.model import Node, walk
from tests.cmr.views.conftest import SequenceBuilder

MS = 1_000_000
CALL_END = 1_000 * MS


def estimated(tree_root: Node) -> dict[str, Node]:
    return {node.name: node for node, _ in walk(tree_root) if node.kind == "estimated"}


def sampled(
    b: SequenceBuilder,
    interval: int,
    phase: int,
    running: tuple[int, int],
    splits: list[int],
    *,
    collapse: bool,
) -> None:
    """Ticks every ``interval`` from ``phase`` over the call; between ``running`` (start, end)
    the stack shows ``work`` inside ``handle``. Consecutive ticks that saw the same stack are one
    sample of their weight when ``collapse`` (as an idle thread's are), else one each; a sample
    starts at its first tick less ``splits[k] %`` of an interval (where the sampler placed the
    change), and lasts until the next sample starts."""
    ticks = list(range(phase, CALL_END, interval))
    stacks = [(1, 2) if running[0] <= tick < running[1] else (1,) for tick in ticks]
    groups: list[tuple[int, int, tuple[int, ...]]] = []  # (first tick, weight, stack)
    for k, (tick, stack) in enumerate(zip(ticks, stacks, strict=True)):
        if collapse and groups and groups[-1][2] == stack:
            first, weight, _ = groups[-1]
            groups[-1] = (first, weight + 1, stack)
        else:
            back = 0 if k == 0 else interval * splits[k % len(splits)] // 100
            groups.append((tick - back, 1, stack))
    for g, (start, weight, stack) in enumerate(groups):
        end = groups[g + 1][0] if g + 1 < len(groups) else start + weight * interval
        b.sample(start, list(stack), weight=weight, duration=end - start)


@settings(max_examples=300, deadline=None)
@given(
    interval=st.sampled_from([1 * MS, 5 * MS, 10 * MS]),
    phase=st.integers(0, 9 * MS),
    start=st.integers(1 * MS, 800 * MS),
    length=st.integers(0, 150 * MS),
    collapse=st.booleans(),
    splits=st.lists(st.integers(1, 99), min_size=1, max_size=5),
)
def test_the_bounds_contain_where_the_frame_really_ran(
    *, interval: int, phase: int, start: int, length: int, splits: list[int], collapse: bool
) -> None:
    b = SequenceBuilder()
    b.call("app.handle", 1, start=0, end=CALL_END, line=10)
    b.frame(1, "handle", line=10)
    b.frame(2, "work", line=20)
    end = start + length
    sampled(b, interval, phase % interval, (start, end), splits, collapse=collapse)
    data = b.data()
    found = estimated(merge_samples(build_tree(data), data).root)
    seen = any(start <= tick < end for tick in range(phase % interval, CALL_END, interval))
    if not seen:  # shorter than the gap between two ticks, between them: never invented
        assert found == {}
        return
    bounds = found["work"].bounds
    assert bounds is not None
    assert bounds.start_min_ns <= start <= bounds.start_max_ns
    assert bounds.end_max_ns is not None
    assert bounds.end_min_ns <= end <= bounds.end_max_ns
    # As tight as the spans allow where the thread ran (one tick per sample, each span under
    # two intervals): each window within a few intervals. A collapsed (idle) stretch is known
    # only to its whole span.
    if all(weight == 1 for weight in (sample.weight for sample in data.samples)):
        assert bounds.start_max_ns - bounds.start_min_ns < 4 * interval
        assert bounds.end_max_ns - bounds.end_min_ns < 4 * interval


def test_a_frame_of_a_call_still_running_has_no_end_bound_past_the_last_sample() -> None:
    b = SequenceBuilder()
    b.call("app.handle", 1, start=0, line=10)  # running
    b.frame(1, "handle", line=10)
    b.frame(2, "work", line=20)
    b.sample(10 * MS, [1], duration=10 * MS)
    b.sample(20 * MS, [1, 2], duration=10 * MS)
    data = b.data()
    bounds = estimated(merge_samples(build_tree(data), data).root)["work"].bounds
    assert bounds is not None
    assert (bounds.start_min_ns, bounds.start_max_ns, bounds.end_min_ns) == (
        10 * MS,
        30 * MS,
        20 * MS,
    )
    assert bounds.end_max_ns is None  # it may still be running
    assert bounds.spread_ns() is None

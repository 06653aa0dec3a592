"""Samples grafted onto a big profile's lines (``cmr.views.samples.bigsamples``) give the profile
the whole merged tree gives, as text and as JSON; sequences it does not take are left to the whole
tree."""

from __future__ import annotations

import dataclasses
import random

import msgspec
import pytest

from cmr.store.base import SequenceData
from cmr.store.columns import columns_available
from cmr.views.analyses.bigprofile import sequence_profile
from cmr.views.analyses.profile import ProfileNode, profile_sequence
from cmr.views.render.json import profile_to_json
from cmr.views.render.profile_text import render_profile
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import SequenceBuilder
from tests.cmr.views.test_bigtree import as_columns, in_start_order

pytestmark = pytest.mark.skipif(not columns_available(), reason="no C accelerator")

NAMES = ("app.main", "app.step", "app.load", "app.save", "app.leaf")
HELPER, MODULE = 100, 101  # an untraced helper's frame, the script's


def _calls(
    rng: random.Random, depth: int, iid: list[int], parent: int, window: tuple[int, int],
    *, out: list[tuple[int, int, str, int, int]],
) -> None:  # fmt: skip
    """Children of ``parent`` one after the other within ``window``, nested to ``depth``."""
    start, end = window
    t = start + rng.randrange(1, 40)
    while depth and t + 60 < end:
        length = rng.randrange(20, min(2_000, end - t))
        iid[0] += 1
        me = iid[0]
        out.append((me, parent, NAMES[1 + rng.randrange(4)], t, t + length))
        _calls(rng, depth - 1, iid, me, (t, t + length), out=out)
        t += length + rng.randrange(0, 30)


def sampled(seed: int) -> SequenceData:
    """A nested tree on one thread and the samples of its ticks: single ticks and collapsed
    ones, stacks through every open call's frame (now and then without the innermost one) down
    to a helper, some ticks before the root started, some collapsed spans past the end of a
    call their stack shows."""
    rng = random.Random(seed)
    b = SequenceBuilder()
    calls = [(1, 0, NAMES[0], 0, 20_000)]
    _calls(rng, 4, [1], 1, (0, 20_000), out=calls)
    for iid, parent, name, start, end in calls:
        b.call(name, iid, parent, start=start, end=end, line=10 * (1 + NAMES.index(name)))
    for number, name in enumerate(NAMES):
        b.frame(number + 1, name.partition(".")[2], line=10 * (1 + number))
    b.frame(HELPER, "helper", line=5, file="util.py")
    b.frame(MODULE, "<module>", line=1, file="main.py")
    t = -500
    while t < 21_000:
        weight = 3 if rng.random() < 0.2 else 1
        # A collapsed sample's stack is mostly that of the calls holding its whole span; now
        # and then that of those holding its start, whose span runs past a shown call's end.
        end = t + 1 if weight == 1 or rng.random() < 0.3 else t + 300 * weight
        chain = [c for c in calls if c[3] <= t and end <= c[4]]
        frames = [MODULE] + [1 + NAMES.index(c[2]) for c in chain]
        if chain and rng.random() < 0.15:
            frames.pop()  # the innermost call had not pushed its frame yet
        if rng.random() < 0.6:
            frames.append(HELPER)
        lines = [rng.randrange(1, 4) for _ in frames]
        b.sample(t, frames, weight=weight, duration=300 * weight, cpu=rng.randrange(0, 300),
                 lines=lines)  # fmt: skip
        t += 300 * weight + rng.randrange(-50, 50)
    return in_start_order(b.data())


def whole_profile(data: SequenceData, lines: bool) -> tuple[str, str]:
    whole = profile_sequence(merge_samples(build_tree(data), data, lines=lines))
    return _texts(data, whole, lines)


def _texts(data: SequenceData, profile: object, lines: bool) -> tuple[str, str]:
    assert profile is not None
    text = render_profile(profile, "t", max_nodes=0)  # type: ignore[arg-type]
    json = profile_to_json(profile, seq=data.seq, method=None, since_ns=None, lines=lines)  # type: ignore[arg-type]
    return text, json


@pytest.mark.parametrize("lines", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_grafted_samples_give_the_profile_of_the_whole_merged_tree(seed: int, lines: bool) -> None:
    data = sampled(seed)
    quick = sequence_profile(as_columns(data), lines=lines)
    assert quick is not None
    assert _texts(data, quick, lines) == whole_profile(data, lines)
    assert quick.roots[0].samples > 0
    assert any(node.kind == "estimated" for node in _everywhere(quick.roots[0]))


def _everywhere(node: ProfileNode) -> list[ProfileNode]:
    return [node, *(n for child in node.children for n in _everywhere(child))]


def test_calls_that_do_not_nest_or_several_threads_are_left_to_the_whole_tree() -> None:
    data = sampled(0)
    records = list(data.invocations)
    running = dataclasses.replace(  # open past its caller's end: the calls do not nest
        data,
        invocations=[records[0], msgspec.structs.replace(records[1], end_ns=None), *records[2:]],
    )
    assert sequence_profile(as_columns(running)) is None
    threaded = dataclasses.replace(
        data, invocations=[*records[:-1], msgspec.structs.replace(records[-1], tid=2)]
    )
    assert sequence_profile(as_columns(threaded)) is None
    assert sequence_profile(data) is None  # a list of records: the whole tree merges them

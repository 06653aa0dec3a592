"""Folded stacks: lines flamegraph tools split correctly, whatever the names."""

from __future__ import annotations

import pytest

from cmr.views.render.folded import default_weight, folded_stacks, render_folded
from cmr.views.tree.calltree import build_tree


def test_separators_inside_names_cannot_split_a_frame_or_a_line(builder):
    builder.call("app.root", 1, start=0, end=10_000)
    builder.call("app.odd;name\nhere", 2, 1, start=1_000, end=4_000)

    text = render_folded(build_tree(builder.data()))

    assert text.splitlines() == ["app.root 7", "app.root;app.odd:name here 3"]


def test_calls_with_the_same_path_add_up_and_zero_weights_are_left_out(builder):
    builder.call("app.root", 1, start=0, end=10_000)
    for iid, start in ((2, 1_000), (3, 3_000), (4, 5_000)):
        builder.call("app.loop", iid, 1, start=start, end=start + 1_400)
    builder.call("app.instant", 5, 1, start=9_000, end=9_000)

    stacks = folded_stacks(build_tree(builder.data()), "time")

    # Summed first (4.2 µs), then rounded, so many short calls are not rounded away one by one.
    assert stacks == {"app.root": 6, "app.root;app.loop": 4}


def test_a_tree_without_samples_is_weighed_by_time(builder):
    builder.call("app.root", 1, start=0, end=10)
    tree = build_tree(builder.data())

    assert default_weight(tree) == "time"
    assert folded_stacks(tree, "samples") == {}
    with pytest.raises(ValueError, match="weight must be one of"):
        folded_stacks(tree, "bytes")

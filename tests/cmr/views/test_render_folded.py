"""Folded stacks: lines flamegraph tools split correctly, whatever the names."""

from __future__ import annotations

import pytest

from cmr.exports import BY_NAME, ExportError, export_sequence
from cmr.store.base import SequenceData
from cmr.store.columns import columns_available
from cmr.views.pipeline import sequence_tree
from cmr.views.render.folded import default_weight, folded_stacks, render_folded
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import SequenceBuilder
from tests.cmr.views.test_bigsamples import sampled
from tests.cmr.views.test_bigtree import as_columns, in_start_order


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


WEIGHTS = [None, "samples", "time"]


def _folded_both_ways(data: SequenceData, weight: str | None) -> tuple[str | None, str]:
    """The folded file drawn from the profile's lines (None: not for these records) and from
    the whole merged tree."""
    fmt = BY_NAME["folded"]
    assert fmt.direct is not None
    assert fmt.render is not None
    direct = fmt.direct(data, weight)
    from_tree = fmt.render(sequence_tree(data), data, weight)
    assert isinstance(from_tree, str)
    return (direct if direct is None or isinstance(direct, str) else direct.decode()), from_tree


@pytest.mark.skipif(not columns_available(), reason="no C accelerator: samples need the tree")
@pytest.mark.parametrize("weight", WEIGHTS)
@pytest.mark.parametrize("seed", range(12))
def test_a_big_sequences_stacks_come_from_its_profile_lines_as_from_its_tree(
    seed: int, weight: str | None
) -> None:
    # `cmr export --format folded` of a million calls built a node per call (15.7 s and 1.4 GB
    # to print a few hundred bytes); the profile's lines are the same stacks, summed per path.
    data = as_columns(sampled(seed))

    direct, from_tree = _folded_both_ways(data, weight)

    assert direct is not None
    assert direct == from_tree
    assert ";helper " in direct or weight == "time"  # estimated frames below the calls


@pytest.mark.parametrize("columns", [False, True])
def test_stacks_by_time_come_from_the_profile_lines_without_samples(
    builder: SequenceBuilder, columns: bool
) -> None:
    if columns and not columns_available():
        pytest.skip("no C accelerator")
    builder.call("app.root", 1, start=0, end=10_000)
    for iid, start in ((2, 1_000), (3, 3_000), (4, 5_000)):
        builder.call("app.loop", iid, 1, start=start, end=start + 1_400)
        builder.call("app.odd;name", 10 + iid, iid, start=start + 100, end=start + 700)
    data = in_start_order(builder.data())
    data = as_columns(data) if columns else data

    expected = "app.root 6\napp.root;app.loop 2\napp.root;app.loop;app.odd:name 2"
    for weight in (None, "time"):
        direct, from_tree = _folded_both_ways(data, weight)
        assert direct == from_tree == expected
    with pytest.raises(ExportError, match="has no samples: use --weight time") as raised:
        export_sequence(data, "folded", weight="samples")
    with pytest.raises(ExportError) as from_tree_error:
        BY_NAME["folded"].render(sequence_tree(data), data, "samples")  # type: ignore[misc]
    assert str(raised.value) == str(from_tree_error.value)

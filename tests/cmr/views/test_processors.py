"""Views that hide parts of a tree: what stays, what is counted hidden, and that input survives."""

from __future__ import annotations

import pytest

from cmr.views.model import walk
from cmr.views.tree.calltree import build_tree
from cmr.views.tree.processors import drop_shorter_than, limit_depth, subtree_size


@pytest.fixture(name="shop")
def fixture_shop(builder):
    """checkout(1000) > [price(300) > [tax(5), rate(200)], pay(running), log(2)]"""
    builder.call("shop.checkout", 1, start=0, end=1_000)
    builder.call("shop.price", 2, 1, start=10, end=310)
    builder.call("shop.tax", 3, 2, start=20, end=25)
    builder.call("shop.rate", 4, 2, start=30, end=230)
    builder.call("shop.pay", 5, 1, start=400)
    builder.call("shop.log", 6, 1, start=500, end=502)
    return build_tree(builder.data())


def names(tree):
    return [(depth, node.name, node.hidden) for node, depth in walk(tree.root)]


def test_limit_depth_keeps_the_top_levels_and_counts_the_rest(shop):
    view = limit_depth(shop, 1)

    assert names(view) == [
        (0, "shop.checkout", 0),
        (1, "shop.price", 2),
        (1, "shop.pay", 0),
        (1, "shop.log", 0),
    ]
    assert view.hidden == 2


def test_depth_zero_is_the_root_alone(shop):
    view = limit_depth(shop, 0)

    assert names(view) == [(0, "shop.checkout", 5)]
    assert view.hidden == 5


def test_a_depth_beyond_the_tree_changes_nothing(shop):
    assert names(limit_depth(shop, 50)) == names(shop)


def test_drop_shorter_than_hides_short_calls_but_keeps_running_ones(shop):
    view = drop_shorter_than(shop, 100)

    assert names(view) == [
        (0, "shop.checkout", 1),  # log (2 ns)
        (1, "shop.price", 1),  # tax (5 ns)
        (2, "shop.rate", 0),
        (1, "shop.pay", 0),  # running: its duration is not known yet
    ]
    assert view.hidden == 2


def test_hidden_time_stays_in_the_parents_self_time(shop):
    before = {node.name: node.self_ns for node, _ in walk(shop.root)}

    view = drop_shorter_than(shop, 100)

    assert {node.name: node.self_ns for node, _ in walk(view.root)} == {
        name: before[name] for name in ("shop.checkout", "shop.price", "shop.rate", "shop.pay")
    }


def test_views_chain_and_carry_earlier_hidden_counts(shop):
    view = limit_depth(drop_shorter_than(shop, 100), 1)

    # price is kept but its remaining child rate is cut: tax (hidden earlier) + rate.
    assert names(view) == [(0, "shop.checkout", 1), (1, "shop.price", 2), (1, "shop.pay", 0)]
    assert view.hidden == 3

    # Cutting price itself hides price, rate and the tax hidden under it earlier.
    assert names(limit_depth(drop_shorter_than(shop, 100), 0)) == [(0, "shop.checkout", 5)]


def test_views_leave_their_input_untouched(shop):
    before = names(shop)

    limit_depth(shop, 0)
    drop_shorter_than(shop, 10_000)

    assert names(shop) == before
    assert shop.hidden == 0


def test_zero_minimum_keeps_everything(shop):
    assert names(drop_shorter_than(shop, 0)) == names(shop)


def test_negative_options_are_refused(shop):
    with pytest.raises(ValueError, match="depth"):
        limit_depth(shop, -1)
    with pytest.raises(ValueError, match="min_duration_ns"):
        drop_shorter_than(shop, -1)


def test_subtree_size_counts_the_node_and_everything_beneath(shop):
    assert subtree_size(shop.root) == 6
    assert subtree_size(limit_depth(shop, 1).root) == 6


def test_views_over_a_ten_thousand_deep_chain(builder):
    depth = 10_000
    for iid in range(1, depth + 1):
        builder.call("m.f", iid, iid - 1, start=iid, end=3 * depth - iid)
    tree = build_tree(builder.data())

    assert limit_depth(tree, 5).hidden == depth - 6
    kept = drop_shorter_than(tree, 2 * depth)  # call i lasts 3 * depth - 2 * i
    assert sum(1 for _ in walk(kept.root)) == depth // 2
    assert kept.hidden == depth // 2

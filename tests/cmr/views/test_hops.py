"""Folding hand-offs to untraced code that ran nothing traced (``cmr.views.tree.hops``): which calls
fold, where they are counted, and that everything else stays."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cmr.store.base import SequenceData
from cmr.views.model import walk
from cmr.views.tree.calltree import build_tree
from cmr.views.tree.hops import fold_empty_hops
from tests.cmr.views.conftest import SequenceBuilder
from tests.cmr.views.test_bigtree import FORMS

MS = 1_000_000


def shop(**hop: object) -> SequenceBuilder:
    """checkout hands ``app.untraced`` to a thread (hid 9); the thread times it as a call of the
    hand-off's own method (what the tracer does for an untraced callable)."""
    builder = SequenceBuilder()
    builder.call("app.checkout", 1, start=0, end=10 * MS)
    builder.call("app.pay", 2, 1, start=1 * MS, end=2 * MS)
    builder.handoff(9, 1, submitted=3 * MS, callable_name="app.untraced")
    options = {"start": 4 * MS, "end": 5 * MS, "tid": 2, "hid": 9} | hop
    builder.call("app.untraced", 3, **options)  # type: ignore[arg-type]
    return builder


def names(tree):
    return [node.name for node, _ in walk(tree.root)]


@pytest.mark.parametrize("form", FORMS)
def test_an_untraced_hop_that_ran_nothing_is_counted_on_its_submitter(
    form: Callable[[SequenceData], SequenceData],
) -> None:
    data = fold_empty_hops(form(shop().data()))
    tree = build_tree(data)

    assert names(tree) == ["app.checkout", "app.pay"]
    assert tree.root.folded == 1
    assert (tree.invocations, tree.threads) == (3, 2)  # as the listing counts them
    assert data.folded == {(0x1111, 1): 1}


def test_hops_that_ran_traced_code_raised_or_run_on_stay():
    ran_something = shop()
    ran_something.call("app.traced_inside", 4, 3, start=4 * MS, end=5 * MS, tid=2)
    raised = shop(error="TimeoutError")
    running = shop(end=None)
    for builder in (ran_something, raised, running):
        tree = build_tree(fold_empty_hops(builder.data()))
        assert "app.untraced" in names(tree)
        assert tree.root.folded == 0


def test_a_traced_function_continuing_a_hand_off_is_never_folded():
    builder = SequenceBuilder()
    builder.call("app.checkout", 1, start=0, end=10 * MS)
    builder.handoff(9, 1, submitted=3 * MS, callable_name="app.work")
    # The traced function has a method id of its own, not the hand-off's.
    builder.call("app.work_traced", 3, start=4 * MS, end=5 * MS, tid=2, hid=9)

    data = builder.data()
    assert fold_empty_hops(data) is data


def test_without_folding_the_tree_is_the_whole_tree():
    tree = build_tree(shop().data())
    assert names(tree) == ["app.checkout", "app.pay", "app.untraced"]
    assert tree.root.folded == 0


def test_a_hop_whose_submitter_is_not_in_the_sequence_stays():
    builder = SequenceBuilder()
    # The submitter (iid 1) ran in another sequence's records, or was lost: nothing to hold it.
    builder.handoff(9, 1, submitted=3 * MS, callable_name="app.untraced")
    builder.call("app.untraced", 3, start=4 * MS, end=5 * MS, tid=2, hid=9)
    builder.call("app.other", 4, start=6 * MS, end=7 * MS)

    data = builder.data()
    assert fold_empty_hops(data) is data

"""``cmr diff``'s rows: call paths of two sequences whose times the test sets."""

from __future__ import annotations

from cmr.views.analyses.diff import call_paths, diff_paths
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import SequenceBuilder

MS = 1_000_000


def checkout(fetches: list[int], *, notify: bool = True):
    """checkout calling fetch once per duration given (ms), one after the other, then notify."""
    builder = SequenceBuilder()
    at = 0
    for iid, ms in enumerate(fetches, start=2):
        builder.call("app.fetch", iid, 1, start=at * MS, end=(at + ms) * MS)
        builder.call("app.parse", 100 + iid, iid, start=at * MS, end=(at + 1) * MS)
        at += ms
    if notify:
        builder.call("app.notify", 99, 1, start=at * MS, end=(at + 5) * MS)
        at += 5
    builder.call("app.checkout", 1, start=0, end=at * MS)
    return build_tree(builder.data()).root


def test_repeated_calls_are_numbered_from_the_second_in_start_order():
    assert call_paths(checkout([10, 20])) == {
        "app.checkout": 35 * MS,
        "app.checkout/app.fetch": 10 * MS,
        "app.checkout/app.fetch/app.parse": 1 * MS,
        "app.checkout/app.fetch#2": 20 * MS,
        "app.checkout/app.fetch#2/app.parse": 1 * MS,
        "app.checkout/app.notify": 5 * MS,
    }


def test_the_call_made_slower_comes_first_and_calls_in_one_only_say_so():
    rows = diff_paths(checkout([10, 20], notify=True), checkout([10, 80, 5], notify=False))

    table = [(r.path, r.a_ns, r.b_ns, r.delta_ns, r.in_a, r.in_b) for r in rows]
    assert table == [
        ("app.checkout", 35 * MS, 95 * MS, 60 * MS, True, True),
        ("app.checkout/app.fetch#2", 20 * MS, 80 * MS, 60 * MS, True, True),
        ("app.checkout/app.fetch#3", None, 5 * MS, 5 * MS, False, True),
        ("app.checkout/app.notify", 5 * MS, None, -5 * MS, True, False),
        ("app.checkout/app.fetch#3/app.parse", None, 1 * MS, 1 * MS, False, True),
        ("app.checkout/app.fetch", 10 * MS, 10 * MS, 0, True, True),
        ("app.checkout/app.fetch#2/app.parse", 1 * MS, 1 * MS, 0, True, True),
        ("app.checkout/app.fetch/app.parse", 1 * MS, 1 * MS, 0, True, True),
    ]


def test_a_call_not_ended_has_no_time_but_is_there():
    builder = SequenceBuilder()
    builder.call("app.checkout", 1, start=0)
    builder.call("app.fetch", 2, 1, start=1 * MS)
    running = build_tree(builder.data()).root

    rows = {r.path: r for r in diff_paths(checkout([10], notify=False), running)}

    assert (rows["app.checkout/app.fetch"].b_ns, rows["app.checkout/app.fetch"].in_b) == (
        None,
        True,
    )
    assert rows["app.checkout/app.fetch"].delta_ns == -10 * MS

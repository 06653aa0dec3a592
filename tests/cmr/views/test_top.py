"""``cmr top``'s rows on sequences whose durations and failures the test sets."""

from __future__ import annotations

from cmr.store.base import SequenceSummary
from cmr.views.analyses.top import by_method, by_root
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import SequenceBuilder

MS = 1_000_000


def line(n: int, root: str, duration_ms: int | None, error: str | None = None) -> SequenceSummary:
    end = None if duration_ms is None else duration_ms * MS
    status = "running" if end is None else "complete"
    return SequenceSummary(n.to_bytes(16, "big"), root, 0, end, 1, 1, 1, status, error=error)


def test_per_root_nearest_rank_percentiles_over_what_ended():
    lines = [line(n, "shop.checkout", n) for n in range(1, 101)]  # 1 .. 100 ms
    lines += [line(200, "shop.checkout", None), line(201, "shop.pay", 7, error="OSError")]

    checkout, pay = by_root(lines)

    assert (checkout.name, checkout.count, checkout.errors) == ("shop.checkout", 101, 0)
    assert [checkout.percentile(q) for q in (0.5, 0.9, 0.99)] == [50 * MS, 90 * MS, 99 * MS]
    assert checkout.max_ns == 100 * MS
    assert (pay.count, pay.errors, pay.percentile(0.5), pay.self_ns) == (1, 1, 7 * MS, None)


def test_a_root_that_never_ended_has_no_percentiles_and_comes_last():
    (ended, running) = by_root([line(1, "a.running", None), line(2, "b.ended", 3)])

    assert (ended.name, running.name) == ("b.ended", "a.running")
    assert (running.percentile(0.99), running.max_ns) == (None, None)


def test_per_method_across_sequences_with_self_time():
    trees = []
    for n, fetch_ms in enumerate([10, 30], start=1):
        builder = SequenceBuilder()
        builder.call("shop.checkout", 1, start=0, end=50 * MS)
        builder.call("shop.fetch", 2, 1, start=1 * MS, end=(1 + fetch_ms) * MS)
        error = "KeyError" if n == 2 else None
        builder.call("shop.parse", 3, 2, start=2 * MS, end=4 * MS, error=error)
        trees.append(build_tree(builder.data()))

    rows = {row.name: row for row in by_method(trees)}

    assert rows["shop.fetch"].count == 2
    assert rows["shop.fetch"].durations == [10 * MS, 30 * MS]
    assert rows["shop.fetch"].self_ns == (10 - 2 + 30 - 2) * MS
    assert (rows["shop.parse"].count, rows["shop.parse"].errors) == (2, 1)
    assert rows["shop.checkout"].self_ns == (50 - 10 + 50 - 30) * MS
    assert by_method(trees)[0].name == "shop.checkout"  # the slowest p99 first

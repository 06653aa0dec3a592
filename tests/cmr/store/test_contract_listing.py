"""The contract for listing by query (``list_sequences(limit, query)``), run against each
backend: the root pattern, durations, status, start window, host and order select the lines
the test's known sequences say they should, over more lines than one page."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cmr.store import Store
from cmr.store.base import SORT_DURATION, SequenceQuery
from cmr.store.listing import PAGE_SIZE
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, FakeClock
from tests.cmr.store.records import seq_id, start

BatchFactory = Callable[..., wire.Batch]
MS = 1_000_000
#: Sequences of the filler process: more than a page, all "app.poll", 1 ms each.
FILLER = PAGE_SIZE + 44


def _seq(n: int) -> bytes:
    return seq_id(f"{n:04x}")


@pytest.fixture(name="listed")
def fixture_listed(store: Store, make_batch: BatchFactory, clock: FakeClock) -> Store:
    """On host "web": checkout#1 (50 ms, raised ValueError), checkout#2 (300 ms), pay (120 ms),
    and a checkout still running; on host "batch": FILLER polls of 1 ms, the newest ones."""
    methods = {1: "shop.checkout", 2: "shop.pay", 3: "app.poll"}
    web = [
        start(1, 1_000 * MS, _seq(1)),
        wire.Error(1, 1_050 * MS, "ValueError"),
        start(2, 2_000 * MS, _seq(2)),
        wire.End(2, 2_300 * MS),
        start(3, 3_000 * MS, _seq(3), method=2),
        wire.End(3, 3_120 * MS),
        start(4, 4_000 * MS, _seq(4)),
    ]
    store.ingest(make_batch(7, 1, {1: web}, methods=methods, host="web"), 1)
    polls: list[wire.Event] = []
    for n in range(FILLER):
        at = (5_000 + n) * MS
        polls += [start(n + 1, at, _seq(100 + n), method=3), wire.End(n + 1, at + MS)]
    store.ingest(make_batch(8, 1, {1: polls}, methods=methods, host="batch"), 1)
    clock.now_ns = CLOCK_OFFSET_NS + 10_000 * MS
    return store


def _seqs(store: Store, limit: int = 1_000, **query: object) -> list[bytes]:
    return [line.seq for line in store.list_sequences(limit, SequenceQuery(**query))]  # type: ignore[arg-type]


def test_the_root_pattern_is_fnmatch_on_the_root_s_name(listed: Store) -> None:
    assert _seqs(listed, root="shop.*") == [_seq(4), _seq(3), _seq(2), _seq(1)]
    assert _seqs(listed, root="*.pay") == [_seq(3)]
    assert _seqs(listed, root="Shop.*") == []  # case matters
    assert len(_seqs(listed, root="app.poll")) == FILLER


def test_durations_select_ended_sequences_only(listed: Store) -> None:
    assert _seqs(listed, min_duration_ns=100 * MS) == [_seq(3), _seq(2)]
    assert _seqs(listed, min_duration_ns=50 * MS, max_duration_ns=120 * MS) == [_seq(3), _seq(1)]
    # The running checkout has no duration yet: no duration filter lets it through.
    assert _seq(4) not in _seqs(listed, max_duration_ns=10**12)


@pytest.mark.parametrize(
    ("status", "expected"),
    [("error", [1]), ("running", [4]), ("incomplete", []), ("complete", [3, 2])],
)
def test_status_error_is_a_root_that_raised(
    listed: Store, status: str, expected: list[int]
) -> None:
    found = _seqs(listed, status=status, root="shop.*")
    assert found == [_seq(n) for n in expected]


def test_the_window_and_the_host_are_read_by_index(listed: Store) -> None:
    t0 = CLOCK_OFFSET_NS
    in_window = _seqs(listed, since_ns=t0 + 2_000 * MS, until_ns=t0 + 3_000 * MS)
    assert in_window == [_seq(3), _seq(2)]
    assert _seqs(listed, host="web") == [_seq(4), _seq(3), _seq(2), _seq(1)]
    assert len(_seqs(listed, host="batch")) == FILLER
    assert _seqs(listed, host="nowhere") == []


def test_the_limit_reaches_past_a_page_of_lines_it_passes_over(listed: Store) -> None:
    # The web sequences are the oldest: a page of polls comes first.
    assert _seqs(listed, limit=2, root="shop.*") == [_seq(4), _seq(3)]
    assert _seqs(listed, limit=2) == [_seq(100 + FILLER - 1), _seq(100 + FILLER - 2)]


def test_sorted_by_duration_longest_first_with_running_ones_last(listed: Store) -> None:
    assert _seqs(listed, limit=3, sort=SORT_DURATION) == [_seq(2), _seq(3), _seq(1)]
    longest_web = _seqs(listed, sort=SORT_DURATION, host="web")
    assert longest_web == [_seq(2), _seq(3), _seq(1), _seq(4)]


# -- the keys a sequence's row keeps for the index change as its batches arrive ----------------


def test_a_root_ended_by_a_later_batch_is_found_by_its_duration(
    store: Store, make_batch: BatchFactory
) -> None:
    methods = {1: "shop.checkout", 2: "shop.fetch"}
    first = [start(1, 1_000 * MS, _seq(1)), start(2, 1_010 * MS, _seq(1), parent=1, method=2)]
    store.ingest(make_batch(7, 1, {1: first}, methods=methods), 1)
    assert _seqs(store, min_duration_ns=MS) == []  # not ended: no duration yet
    later = [wire.End(2, 1_200 * MS), wire.End(1, 1_400 * MS)]
    store.ingest(make_batch(7, 2, {1: later}, methods=methods), 1)

    assert _seqs(store, min_duration_ns=300 * MS, root="shop.checkout") == [_seq(1)]
    assert _seqs(store, max_duration_ns=300 * MS) == []
    assert _seqs(store, sort=SORT_DURATION, status="complete") == [_seq(1)]


def test_a_root_whose_end_arrived_before_its_start_is_found_by_its_duration(
    store: Store, make_batch: BatchFactory
) -> None:
    methods = {1: "shop.checkout"}
    store.ingest(make_batch(7, 2, {1: [wire.Error(1, 1_500 * MS, "KeyError")]}), 1)
    store.ingest(make_batch(7, 1, {1: [start(1, 1_000 * MS, _seq(1))]}, methods=methods), 1)

    assert _seqs(store, min_duration_ns=500 * MS, status="error") == [_seq(1)]
    assert _seqs(store, status="complete") == []


def test_a_sequence_is_found_by_its_true_root_once_it_arrives(
    store: Store, make_batch: BatchFactory
) -> None:
    methods = {1: "shop.checkout", 2: "shop.fetch"}
    child = [start(2, 1_010 * MS, _seq(1), parent=1, method=2), wire.End(2, 1_020 * MS)]
    store.ingest(make_batch(7, 2, {1: child}, methods=methods), 1)
    # Only a child so far: the line names it, as the best guess there is.
    assert _seqs(store, root="shop.fetch") == [_seq(1)]
    root = [start(1, 1_000 * MS, _seq(1)), wire.End(1, 1_100 * MS)]
    store.ingest(make_batch(7, 1, {1: root}, methods=methods), 1)

    assert _seqs(store, root="shop.fetch") == []
    assert _seqs(store, root="shop.check*", min_duration_ns=100 * MS) == [_seq(1)]
    assert _seqs(store, sort=SORT_DURATION, max_duration_ns=100 * MS) == [_seq(1)]


def test_a_sequence_rooted_at_a_remote_parent_is_found_like_any_other(
    store: Store, make_batch: BatchFactory
) -> None:
    # Two requests a foreign system sent (a hand-off nobody here recorded), and one of ours.
    methods = {1: "api.handle"}
    events = [
        start(1, 1_000 * MS, _seq(1), hid=0xF1),
        wire.End(1, 1_900 * MS),
        start(2, 2_000 * MS, _seq(2), hid=0xF2),
        wire.End(2, 2_050 * MS),
        start(3, 3_000 * MS, _seq(3)),
        wire.End(3, 3_500 * MS),
    ]
    store.ingest(make_batch(7, 1, {1: events}, methods=methods), 1)

    assert _seqs(store, root="<remote*") == [_seq(2), _seq(1)]
    assert _seqs(store, root="api.*") == [_seq(3)]
    assert _seqs(store, sort=SORT_DURATION) == [_seq(1), _seq(3), _seq(2)]
    assert _seqs(store, min_duration_ns=400 * MS) == [_seq(3), _seq(1)]
    assert _seqs(store, sort=SORT_DURATION, limit=1, root="<remote*") == [_seq(1)]


# -- durations at every edge of SQLite's duration bands (``listing_sql.DURATION_BAND``) --------

#: Durations at and beside the edges of the bands (a decade's hundredths), some shared.
EDGES = [0, 1, 9, 10, 11, 99, 100, 101, 109, 110, 999, 1_000, 1_009, 1_010, 1_099, 1_100]
EDGES += [10**6 - 1, 10**6, 10**6 + 1, 1_099_999, 1_100_000, 10**9, 10**9 + 5, 123_456_789_012]


def test_durations_sort_and_bound_exactly_across_the_bands_over_many_pages(
    store: Store, make_batch: BatchFactory
) -> None:
    durations = EDGES * 3  # equal durations: the newest start first
    durations += [(n * 7_919) % 2_000_003 for n in range(PAGE_SIZE * 2)]
    events: list[wire.Event] = []
    started: dict[bytes, tuple[int, int]] = {}
    for n, duration in enumerate(durations):
        at = (1_000 + n) * MS
        events += [start(n + 1, at, _seq(n + 1)), wire.End(n + 1, at + duration)]
        started[_seq(n + 1)] = (duration, at)
    store.ingest(make_batch(7, 1, {1: events}, methods={1: "app.work"}), 1)

    def longest_first(seqs: list[bytes]) -> list[bytes]:
        return sorted(seqs, key=lambda seq: (*started[seq], seq), reverse=True)

    assert _seqs(store, sort=SORT_DURATION) == longest_first(list(started))
    for bound in EDGES:
        at_least = [seq for seq, (duration, _at) in started.items() if duration >= bound]
        at_most = [seq for seq, (duration, _at) in started.items() if duration <= bound]
        assert _seqs(store, sort=SORT_DURATION, min_duration_ns=bound) == longest_first(at_least)
        assert _seqs(store, sort=SORT_DURATION, max_duration_ns=bound) == longest_first(at_most)
        newest = sorted(at_most, key=lambda seq: (started[seq][1], seq), reverse=True)
        assert _seqs(store, max_duration_ns=bound) == newest

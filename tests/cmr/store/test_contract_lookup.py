"""The store contract: sequence ids by prefix, the ingest counters, and a closed store."""

from __future__ import annotations

import pytest

from cmr.store import (
    AmbiguousSequenceError,
    Store,
    StoreError,
    UnknownSequenceError,
)
from invoseq import wire
from tests.cmr.store.records import BatchFactory, S, seq_id, start

PREFIXED = [seq_id("ab12"), seq_id("ab34"), seq_id("ffee"), seq_id("0123")]


@pytest.fixture(name="prefixed")
def fixture_prefixed(store: Store, make_batch: BatchFactory) -> Store:
    events = [start(i + 1, 100 + i, seq) for i, seq in enumerate(PREFIXED)]
    store.ingest(make_batch(7, 1, {1: events}), 1)
    return store


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("ab12", PREFIXED[0]),
        (PREFIXED[1].hex(), PREFIXED[1]),
        ("AB3", PREFIXED[1]),  # upper case and an odd number of digits
        ("f", PREFIXED[2]),  # the top of the id space
        ("0", PREFIXED[3]),
    ],
)
def test_prefix_resolves_to_its_only_match(prefixed: Store, prefix: str, expected: bytes) -> None:
    assert prefixed.resolve_sequence(prefix) == expected


def test_unknown_prefix_says_so(prefixed: Store) -> None:
    with pytest.raises(UnknownSequenceError, match=r"^no sequence matches 'ab5'$"):
        prefixed.resolve_sequence("ab5")


def test_ambiguous_prefix_names_the_matches(prefixed: Store) -> None:
    with pytest.raises(AmbiguousSequenceError) as caught:
        prefixed.resolve_sequence("Ab")

    assert str(caught.value) == (
        "'ab' matches 2 sequences: ab1200000000…, ab3400000000…; give more digits"
    )


def test_ambiguous_prefix_shows_a_few_of_many_matches(
    store: Store, make_batch: BatchFactory
) -> None:
    events = [start(i + 1, 100, seq_id(f"7{i}")) for i in range(7)]
    store.ingest(make_batch(7, 1, {1: events}), 1)

    with pytest.raises(
        AmbiguousSequenceError, match=r"^'7' matches 7 sequences: 70.*, 74[0-9]*…, …;"
    ):
        store.resolve_sequence("7")


#: Nine ids sharing their first 12 hex digits (as crafted ids can), two sharing 20 of them, and
#: one alone: the shortest unique prefixes are 13, 21 and 12 digits.
CROWDED = [seq_id("c0ffee" * 2 + f"{i:x}") for i in range(1, 8)] + [
    seq_id("c0ffee" * 2 + "9" + "5" * 7 + "a"),
    seq_id("c0ffee" * 2 + "9" + "5" * 7 + "b"),
]
ALONE = seq_id("1234")


@pytest.fixture(name="crowded")
def fixture_crowded(store: Store, make_batch: BatchFactory) -> Store:
    events = [start(i + 1, 100 + i, seq) for i, seq in enumerate([*CROWDED, ALONE])]
    store.ingest(make_batch(7, 1, {1: events}), 1)
    return store


def test_neighbours_are_the_ids_just_below_and_above(crowded: Store) -> None:
    ordered = sorted([*CROWDED, ALONE])
    around = crowded.neighbours([ordered[0], ordered[4], ordered[-1]])
    assert around == {
        ordered[0]: (None, ordered[1]),
        ordered[4]: (ordered[3], ordered[5]),
        ordered[-1]: (ordered[-2], None),
    }
    assert crowded.neighbours([]) == {}


def test_short_ids_are_the_shortest_unique_prefixes_of_at_least_12_digits(crowded: Store) -> None:
    short = crowded.short_ids([*CROWDED, ALONE])
    assert short[ALONE] == "123400000000"
    assert [len(short[seq]) for seq in CROWDED] == [13] * 7 + [21, 21]
    for seq, prefix in short.items():
        assert seq.hex().startswith(prefix)
        assert crowded.resolve_sequence(prefix) == seq  # what is printed resolves, always


def test_an_id_not_stored_gets_the_prefix_its_stored_neighbours_leave(crowded: Store) -> None:
    """A sequence pruned meanwhile, or not yet listed: still a prefix no stored id shares."""
    missing = seq_id("c0ffee" * 2 + "1" + "0" * 5 + "1")
    assert crowded.short_ids([missing])[missing] == missing.hex()[:19]  # 18 shared, then one


@pytest.mark.parametrize("prefix", ["", "xyz", "ab-1", "a" * 33])
def test_malformed_prefix_is_refused(prefixed: Store, prefix: str) -> None:
    with pytest.raises(UnknownSequenceError, match="is not a sequence id: give 1 to 32 hex digits"):
        prefixed.resolve_sequence(prefix)


# -- stats ----------------------------------------------------------------------------------


def test_stats_count_events_batches_and_rejections(store: Store, make_batch: BatchFactory) -> None:
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S), wire.End(1, 200)]}), 10)
    store.ingest(make_batch(7, 2, {1: [start(2, 300, S)], 2: [start(3, 300, S)]}), 20)
    store.record_rejected("garbage")
    store.record_rejected("garbage", 2)
    store.record_rejected("decode")

    stats = store.stats()

    assert (stats.batches, stats.duplicate_batches, stats.events) == (2, 0, 4)
    assert stats.rejected == {"decode": 1, "garbage": 3}


def test_stats_keep_the_largest_drop_count_per_process(
    store: Store, make_batch: BatchFactory
) -> None:
    # Drop counts are cumulative; batches may arrive out of order.
    store.ingest(make_batch(7, 2, {}, dropped=5), 30)
    store.ingest(make_batch(7, 1, {}, dropped=3), 10)
    store.ingest(make_batch(8, 1, {}, final=True), 20)

    processes = store.stats().processes

    assert [(p.puid, p.dropped, p.ended, p.last_seen_ns, p.state) for p in processes] == [
        (7, 5, False, 30, "alive"),
        (8, 0, True, 20, "ended"),
    ]


def test_closed_store_refuses_use(store: Store) -> None:
    store.close()

    with pytest.raises(StoreError, match="closed"):
        store.stats()


# -- SQLite specifics -----------------------------------------------------------------------

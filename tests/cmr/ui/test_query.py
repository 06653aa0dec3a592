"""The list's selection on a real (in-memory) store: filters reach past the first window of
recent sequences, up to the documented bound, and query values parse as the form sends them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cmr.store import Store, open_store
from cmr.ui import query
from cmr.ui.query import QueryError, SequenceFilter, parse_filter, select_sequences
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, BatchFactory

SEQUENCES = 300
#: The oldest sequences last long and call method 3; the others are short and call method 2.
SPECIAL = 10
LONG_NS = 1_000_000
SHORT_NS = 1_000


def seq_id(n: int) -> bytes:
    return (n + 1).to_bytes(16, "big")


@pytest.fixture(name="store")
def fixture_store(make_batch: BatchFactory) -> Iterator[Store]:
    store = open_store(memory=True)
    events: list[wire.Event] = []
    for n in range(SEQUENCES):
        root, child, start = 2 * n + 1, 2 * n + 2, n * 10 * LONG_NS
        special = n < SPECIAL
        events.append(wire.Start(root, 0, 0, 1, start, seq_id(n)))
        events.append(wire.Start(child, root, 0, 3 if special else 2, start + 1, seq_id(n)))
        events.append(wire.End(child, start + 2))
        events.append(wire.End(root, start + (LONG_NS if special else SHORT_NS)))
    store.ingest(make_batch(1, 1, {1: events}, final=True), CLOCK_OFFSET_NS)
    yield store
    store.close()


def oldest_first(n: int) -> list[bytes]:
    """The ``n`` oldest sequences, newest first (the order lists come in)."""
    return [seq_id(k) for k in reversed(range(n))]


def test_a_duration_filter_finds_sequences_older_than_its_first_window(store: Store) -> None:
    wanted = SequenceFilter(min_ns=LONG_NS // 2)
    assert [s.seq for s in select_sequences(store, wanted, 0)] == oldest_first(SPECIAL)
    short = select_sequences(store, SequenceFilter(max_ns=LONG_NS // 2, limit=5), 0)
    assert [s.seq for s in short] == [seq_id(k) for k in range(SEQUENCES - 1, SEQUENCES - 6, -1)]


def test_a_method_filter_finds_old_callers(store: Store) -> None:
    found = select_sequences(store, SequenceFilter(method="app.m3", limit=4), 0)
    assert [s.seq for s in found] == oldest_first(SPECIAL)[:4]
    assert select_sequences(store, SequenceFilter(method="app.m99"), 0) == []


def test_durations_are_found_by_index_and_a_method_looks_no_further_than_the_scan_window(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The long sequences are the oldest, out of a window of the newest.
    monkeypatch.setattr(query, "SCAN_WINDOW", SEQUENCES - SPECIAL)
    long_ones = select_sequences(store, SequenceFilter(min_ns=LONG_NS // 2), 0)
    assert [s.seq for s in long_ones] == oldest_first(SPECIAL)
    assert select_sequences(store, SequenceFilter(method="app.m3"), 0) == []


def test_form_values_parse_and_blank_ones_filter_nothing() -> None:
    blank = {"method": [""], "min_ms": [""], "max_ms": [" "], "status": [""], "limit": [""]}
    assert parse_filter(blank) == SequenceFilter()
    assert not parse_filter(blank).filters
    wanted = parse_filter(
        {
            "method": [" shop.checkout "],
            "min_ms": ["1.5"],
            "max_ms": ["2000"],
            "status": ["running"],
        }
    )
    assert wanted == SequenceFilter("shop.checkout", 1_500_000, 2_000_000_000, "running")
    assert parse_filter({"limit": ["1000"]}).limit == query.MAX_LIMIT
    with pytest.raises(QueryError, match=r"limit: expected 1 to 1000, got 1001"):
        parse_filter({"limit": ["1001"]})
    with pytest.raises(QueryError, match=r"got '1111111111111111111111111111111111111111…'"):
        parse_filter({"min_ms": ["1" * 500 + "x"]})


def test_service_sequences_are_listed_only_for_their_kind(make_batch: BatchFactory) -> None:
    store = open_store(memory=True)
    try:
        events = [
            wire.Start(1, 0, 0, 1, 100, seq_id(0)),
            wire.End(1, 200),
            wire.Start(2, 0, 0, 2, 300, seq_id(1)),  # the lifespan: running
        ]
        methods = {1: "shop.GET /orders/{int}", 2: "invoseq.service.asgi.lifespan"}
        store.ingest(make_batch(1, 1, {1: events}, methods=methods), CLOCK_OFFSET_NS)
        listed = {
            kind: [s.seq for s in select_sequences(store, parse_filter(given), 0)]
            for kind, given in (
                ("default", {}),
                ("service", {"kind": ["service"]}),
                ("all", {"kind": ["all"]}),
            )
        }
        assert listed == {
            "default": [seq_id(0)],
            "service": [seq_id(1)],
            "all": [seq_id(1), seq_id(0)],
        }
        with pytest.raises(QueryError, match=r"kind: expected one of request, service, all"):
            parse_filter({"kind": ["requests"]})
    finally:
        store.close()

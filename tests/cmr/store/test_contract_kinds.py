"""The contract for sequence kinds, run against each store: a sequence rooted in the service
module (an ASGI lifespan, a server's start-up) is listed only when a query asks for service
sequences or for all; the kind a query asks for applies with its other fields."""

from __future__ import annotations

from cmr.store import Store
from cmr.store.base import KIND_ALL, KIND_REQUEST, KIND_SERVICE, SequenceQuery
from invoseq import wire
from invoseq.events import SERVICE_MODULE
from tests.cmr.conftest import BatchFactory
from tests.cmr.store.records import seq_id, start

REQUEST, LIFESPAN, STARTUP = seq_id("a1"), seq_id("b2"), seq_id("c3")
METHODS = {
    1: "shop.GET /orders/{int}",
    2: f"{SERVICE_MODULE}.asgi.lifespan",
    3: f"{SERVICE_MODULE}.uvicorn.startup",
    4: "shop.load",
}


def listed(store: Store, kind: str, **query: object) -> set[bytes]:
    return {line.seq for line in store.list_sequences(100, SequenceQuery(kind=kind, **query))}


def test_service_sequences_are_listed_only_when_asked(
    store: Store, make_batch: BatchFactory
) -> None:
    events = [
        start(1, 100, STARTUP, method=3),
        start(2, 110, STARTUP, parent=1, method=4),
        wire.End(2, 120),
        wire.End(1, 130),
        start(3, 200, LIFESPAN, method=2),  # running: it lasts as long as the server
        start(4, 300, REQUEST, method=1),
        wire.End(4, 400),
    ]
    store.ingest(make_batch(7, 1, {1: events}, methods=METHODS), received_ns=5)
    assert listed(store, KIND_REQUEST) == {REQUEST}
    assert listed(store, KIND_SERVICE) == {LIFESPAN, STARTUP}
    assert listed(store, KIND_ALL) == {REQUEST, LIFESPAN, STARTUP}
    assert {line.seq for line in store.list_sequences(100)} == {REQUEST, LIFESPAN, STARTUP}
    assert listed(store, KIND_SERVICE, status="running") == {LIFESPAN}
    assert listed(store, KIND_REQUEST, status="running") == set()
    assert listed(store, KIND_SERVICE, sort="duration") == {LIFESPAN, STARTUP}

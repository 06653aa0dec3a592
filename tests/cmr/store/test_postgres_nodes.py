"""Nodes sharing one PostgreSQL database: two ingesting the same batches at once store each
exactly once, and a node survives the server dropping its connection.
Runs against the server INVOSEQ_TEST_PG names (see conftest.py), each test in its own schema."""

from __future__ import annotations

import pytest

from cmr.store import open_store
from cmr.store.postgres.connect import connect
from tests.cmr.conftest import FakeClock
from tests.cmr.store.postgres_support import run_together as _run_together
from tests.cmr.store.records import BatchFactory, seq_id, start

pytestmark = pytest.mark.postgres


def test_two_nodes_ingesting_the_same_batches_at_once_store_each_exactly_once(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    shared = [seq_id(f"5{n}") for n in range(4)]
    batches = [
        make_batch(
            puid,
            number,
            # Every batch touches the same process row and the same sequence rows.
            {1: [start(number * 10 + k, number * 100 + k, seq) for k, seq in enumerate(shared)]},
        )
        for puid in (7, 8)
        for number in range(1, 21)
    ]
    nodes = [open_store(pg_url, clock=clock) for _ in range(2)]
    stored: list[list[bool]] = [[], []]
    try:
        _run_together(
            lambda: stored[0].extend(nodes[0].ingest(b, 1) for b in batches),
            lambda: stored[1].extend(nodes[1].ingest(b, 1) for b in reversed(batches)),
        )
        stats = nodes[0].stats()
        invocations = [len(nodes[1].load_sequence(seq).invocations) for seq in shared]
    finally:
        for node in nodes:
            node.close()

    # Each batch was stored by exactly one node; the other saw a duplicate.
    assert sum(stored[0]) + sum(stored[1]) == len(batches)
    assert (stats.batches, stats.duplicate_batches) == (len(batches), len(batches))
    assert stats.events == 4 * len(batches)
    assert invocations == [len(batches)] * len(shared)


def test_a_node_survives_the_server_dropping_its_connection(
    pg_url: str, make_batch: BatchFactory, clock: FakeClock
) -> None:
    url = f"{pg_url}&application_name=dropped_node"
    store = open_store(url, clock=clock)
    try:
        with connect(pg_url) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'dropped_node'"
            )
        assert store.ingest(make_batch(7, 1, {1: [start(1, 100, seq_id("5e"))]}), 1)
        assert len(store.list_sequences(10)) == 1
    finally:
        store.close()

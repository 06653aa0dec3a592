"""The repository server over real ZeroMQ sockets: what it stores and acknowledges, and to whom.
A valid batch is stored then acknowledged, a resent one acknowledged again but stored once,
each sender gets its own acknowledgements, even for batches queued while the store is busy; a
group of messages gets an ack for each batch stored, and a store failure none, so that the
sender retries."""

from __future__ import annotations

import gc
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import zmq

from cmr.server.groups import GROUP_BATCHES
from cmr.server.ingest import Ingest
from cmr.server.server import ServerThread
from cmr.store import Store
from cmr.store.base import Outcome
from cmr.store.memory.store import MemoryStore
from cmr.store.sqlite.store import SQLiteStore
from invoseq import wire
from tests.cmr.server.conftest import SEQ, BatchFactory, Encode, events, receive_ack, request

pytestmark = pytest.mark.system


def test_valid_batch_is_stored_then_acknowledged(
    store: Store, client: zmq.Socket[bytes], make_batch: BatchFactory, encode_batch: Encode
) -> None:
    ack = request(client, encode_batch(make_batch(7, 1, events())))

    assert ack == wire.Ack(7, 1)
    assert [r.iid for r in store.load_sequence(SEQ).invocations] == [1]


def test_resent_batch_is_acknowledged_again_but_stored_once(
    store: Store, client: zmq.Socket[bytes], make_batch: BatchFactory, encode_batch: Encode
) -> None:
    frames = encode_batch(make_batch(7, 1, events()))

    assert request(client, frames) == request(client, frames) == wire.Ack(7, 1)
    stats = store.stats()
    assert (stats.batches, stats.duplicate_batches, stats.events) == (1, 1, 2)


def test_each_sender_gets_its_own_acknowledgements(
    server: ServerThread,
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    first, second = connect(server.endpoint), connect(server.endpoint)
    first.send_multipart(encode_batch(make_batch(7, 1, events())))
    second.send_multipart(encode_batch(make_batch(8, 1, events())))

    assert receive_ack(second) == wire.Ack(8, 1)
    assert receive_ack(first) == wire.Ack(7, 1)


class HeldStore(MemoryStore):
    """A memory store whose first write waits until the test lets it go: batches sent
    meanwhile queue on the server's socket, and are stored in groups."""

    def __init__(self) -> None:
        super().__init__()
        self.busy = threading.Event()
        self.release = threading.Event()
        self.groups: list[int] = []

    def ingest_many(
        self,
        batches: Sequence[wire.Batch],
        received_ns: int,
        bodies: Sequence[bytes] | None = None,
    ) -> list[Outcome]:
        self.groups.append(len(batches))
        self.busy.set()
        assert self.release.wait(30), "the test never released the store"
        return super().ingest_many(batches, received_ns, bodies)


def test_batches_that_queue_while_the_store_is_busy_are_each_acked_to_their_sender(
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    store = HeldStore()
    try:
        with ServerThread(store, "tcp://127.0.0.1:*") as server:
            senders = {7: connect(server.endpoint), 8: connect(server.endpoint)}
            senders[7].send_multipart(encode_batch(make_batch(7, 0, events())))
            assert store.busy.wait(30), "the server never stored the first batch"
            for batch_no in range(1, 11):  # these wait on the socket meanwhile
                for puid, sock in senders.items():
                    sock.send_multipart(encode_batch(make_batch(puid, batch_no, events())))
            store.release.set()
            acked = {
                puid: [receive_ack(sock) for _ in range(11 if puid == 7 else 10)]
                for puid, sock in senders.items()
            }
        assert acked[7] == [wire.Ack(7, n) for n in range(11)]
        assert acked[8] == [wire.Ack(8, n) for n in range(1, 11)]
        assert sum(store.groups) == 21  # every batch stored once
        assert max(store.groups) <= GROUP_BATCHES
        assert store.stats().batches == 21
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_group_of_messages_gets_an_ack_for_each_batch_stored(
    tmp_path: Path, make_batch: BatchFactory, encode_batch: Encode, kind: str
) -> None:
    # The memory store takes decoded batches; SQLite, a group packed batch by batch as decoded.
    valid = encode_batch(make_batch(7, 1, events()))
    overflowing = encode_batch(
        make_batch(7, 2, {1: [wire.Start(2, 0, 0, 1, 100, SEQ), wire.End(2, 2**63 - 1)]})
    )
    garbage = [b"not invoseq", b"\x00"]
    store = MemoryStore() if kind == "memory" else SQLiteStore(str(tmp_path / "cmr.sqlite"))
    try:
        acks = Ingest(store).handle_many([garbage, valid, overflowing, valid])

        assert acks == [None, wire.Ack(7, 1), None, wire.Ack(7, 1)]  # resent: acked again
        stats = store.stats()
        assert (stats.batches, stats.duplicate_batches) == (1, 1)
        assert stats.rejected == {"garbage": 1, "decode": 1}
        assert [line.invocations for line in store.list_sequences(10)] == [
            1
        ]  # nothing of the refused
        assert gc.isenabled()  # the collector paused for the group is back on
    finally:
        store.close()


def test_store_failure_is_not_acknowledged_so_the_sender_retries(
    tmp_path: Path,
    make_batch: BatchFactory,
    encode_batch: Encode,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "cmr.sqlite"
    store = SQLiteStore(str(path), busy_timeout_ms=50)
    ingest = Ingest(store)
    frames = encode_batch(make_batch(7, 1, events()))
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database
        assert ingest.handle(frames) is None
        assert "cannot store batch 1 of process 7" in caplog.text
        later = encode_batch(make_batch(7, 2, events()))
        assert ingest.handle_many([frames, later]) == [None, None]  # one transaction: neither
        assert "cannot store batch 1 of process 7 and 1 more in its group" in caplog.text
        assert gc.isenabled()  # a failed group leaves the collector on, too
        blocker.execute("ROLLBACK")

        assert ingest.handle(frames) == wire.Ack(7, 1)
        assert store.stats().batches == 1
    finally:
        blocker.close()
        store.close()

"""A sequence worth exporting: two processes (on two hosts, with the same OS pid), a pool thread,
two hand-offs, a call that raised, a call that never ended in a process that went silent, and
stack samples under two measured calls.

Times (from the sequence's start, CLOCK_OFFSET_NS): shop.checkout 0-20 ms on web-1's main thread
calls shop.price 1-3 ms, hands shop.charge to a pool thread at 4 ms (it runs 4.5-12 ms and calls
shop.gateway 5-11 ms), hands stock.reserve to the db-1 process at 5 ms (it runs 6-15 ms and
calls stock.lock at 7 ms, which never ends: db-1 promised heartbeats and went silent), and calls
shop.audit 6-7 ms, which raises ValueError. web-1 ended cleanly.
"""

from __future__ import annotations

import msgspec

from cmr.store import open_store
from cmr.store.base import SequenceData, Store
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, make_batch

MS = 1_000_000
SEQ = bytes.fromhex("5e0e1c0de0000000000000000000a11d")
SHOP = 0x5100
STOCK = 0x5200
HID_POOL = 0x7100
HID_STOCK = 0x7200
SHOP_METHODS = {
    1: "shop.checkout",
    2: "shop.price",
    3: "shop.charge",
    4: "stock.reserve",
    5: "shop.audit",
    6: "shop.gateway",
}
STOCK_METHODS = {1: "stock.reserve", 2: "stock.lock"}
#: Frames as a sampler interns them; make_batch puts method m of module x in /src/x.py at line
#: 10 + m, so frames 2 and 5 are shop.gateway's and shop.price's own frames.
SHOP_FRAMES = [
    wire.FrameInfo(1, "/usr/lib/python3/threading.py", "Thread.run", 990),
    wire.FrameInfo(2, "/src/shop.py", "gateway", 16),
    wire.FrameInfo(3, "/src/http.py", "send", 40),
    wire.FrameInfo(4, "/src/json.py", "dumps", 5),
    wire.FrameInfo(5, "/src/shop.py", "price", 12),
    wire.FrameInfo(6, "/src/tax.py", "rate", 3),
]
SHOP_SAMPLES = [
    wire.Sample(2, 6 * MS, 1, 2 * MS, 1 * MS, [1, 2, 3], [995, 18, 44]),
    wire.Sample(2, 8 * MS, 1, 2 * MS, 2 * MS, [1, 2, 3], [995, 18, 45]),
    wire.Sample(2, 10 * MS, 1, 1 * MS, 0, [1, 2, 4], [995, 19, 7]),
    wire.Sample(1, 1 * MS + 500_000, 1, 1 * MS, 1 * MS, [5, 6], [13, 4]),
]
#: When the repository received each process's latest batch.
SHOP_SEEN_NS = CLOCK_OFFSET_NS + 21 * MS
STOCK_SEEN_NS = CLOCK_OFFSET_NS + 16 * MS


def shop_batches(*, samples: bool = True) -> list[wire.Batch]:
    main = [
        wire.Start(1, 0, 0, 1, 0, SEQ),
        wire.Start(2, 1, 0, 2, 1 * MS, SEQ),
        wire.End(2, 3 * MS),
        wire.Handoff(HID_POOL, 1, "thread", 3, 4 * MS, SEQ),
        wire.Handoff(HID_STOCK, 1, "process", 4, 5 * MS, SEQ),
        wire.Start(3, 1, 0, 5, 6 * MS, SEQ),
        wire.Error(3, 7 * MS, "ValueError"),
        wire.End(1, 20 * MS),
    ]
    pool = [
        wire.Start(4, 1, HID_POOL, 3, 4 * MS + 500_000, SEQ),
        wire.Start(5, 4, 0, 6, 5 * MS, SEQ),
        wire.End(5, 11 * MS),
        wire.End(4, 12 * MS),
    ]
    first = make_batch(
        SHOP, 1, {1: main[:4], 2: pool[:2]}, methods=SHOP_METHODS, pid=4242, host="web-1"
    )
    second = make_batch(
        SHOP, 2, {1: main[4:], 2: pool[2:]}, methods={}, pid=4242, host="web-1", final=True
    )
    if samples:
        second = msgspec.structs.replace(second, frames=SHOP_FRAMES, samples=SHOP_SAMPLES)
    return [first, second]


def stock_batches() -> list[wire.Batch]:
    events = [
        wire.Start(1, 0, HID_STOCK, 1, 6 * MS, SEQ),
        wire.Start(2, 1, 0, 2, 7 * MS, SEQ),
        wire.End(1, 15 * MS),
    ]
    return [
        make_batch(
            STOCK, 1, {1: events}, methods=STOCK_METHODS, pid=4242, host="db-1", heartbeat_ms=1000
        )
    ]


def fill(store: Store, *, samples: bool = True) -> None:
    """Store the sequence as `cmr serve` would have received it."""
    for batch in shop_batches(samples=samples):
        assert store.ingest(batch, SHOP_SEEN_NS)
    for batch in stock_batches():
        assert store.ingest(batch, STOCK_SEEN_NS)


def filled(path: str, *, samples: bool = True) -> str:
    """A repository file at ``path`` holding the sequence (``fill``), closed again."""
    store = open_store(path)
    try:
        fill(store, samples=samples)
    finally:
        store.close()
    return path


def load(path: str, seq: bytes = SEQ) -> SequenceData:
    """A stored sequence's records, as a command reads them."""
    store = open_store(path, readonly=True)
    try:
        return store.load_sequence(seq)
    finally:
        store.close()

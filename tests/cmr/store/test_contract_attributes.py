"""The store contract: attributes that arrive after their invocation's Start (a later batch's
Attrs) read back as they were sent, floats JSON has no number for included."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

from cmr.store import Store, open_store
from cmr.store.stored_batches import NOT_FINITE
from invoseq import wire
from tests.cmr.conftest import FakeClock
from tests.cmr.store.records import BatchFactory, S, start


def test_late_attributes_keep_infinities_and_nan_as_their_text(
    store: Store, make_batch: BatchFactory
) -> None:
    """A float attribute may be infinite or NaN (an OpenTelemetry span's, a ratio of zeros):
    one sent in a later batch than its Start is kept as its text, where JSON's null made the
    sequence unreadable (a validation error on every read of it)."""
    store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), 1)
    late = {"up": math.inf, "down": -math.inf, "odd": math.nan, "ratio": 0.5, "n": 3}
    store.ingest(make_batch(7, 2, {1: [wire.Attrs(1, late), wire.End(1, 200)]}), 1)

    (record,) = store.load_sequence(S).invocations

    assert record.attributes == {"up": "inf", "down": "-inf", "odd": "nan", "ratio": 0.5, "n": 3}


def test_a_null_an_earlier_version_stored_reads_as_not_finite(
    tmp_path: Path, make_batch: BatchFactory, clock: FakeClock
) -> None:
    path = tmp_path / "cmr.sqlite"
    store = open_store(str(path), clock=clock)
    try:
        store.ingest(make_batch(7, 1, {1: [start(1, 100, S)]}), 1)
        store.ingest(make_batch(7, 2, {1: [wire.Attrs(1, {"up": 1.5}), wire.End(1, 200)]}), 1)
    finally:
        store.close()
    with sqlite3.connect(path) as conn:  # as an earlier version wrote an infinity
        conn.execute("""UPDATE late_attrs SET attributes = '{"up":null}'""")
    store = open_store(str(path), readonly=True)
    try:
        (record,) = store.load_sequence(S).invocations
    finally:
        store.close()

    assert record.attributes == {"up": NOT_FINITE}

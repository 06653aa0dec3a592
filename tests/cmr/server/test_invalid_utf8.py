"""A string field holding invalid UTF-8 is bad input like any other: counted and refused, never an
exception (msgspec raises UnicodeDecodeError for it, which is not a DecodeError)."""

from __future__ import annotations

import zlib

import msgspec
import pytest

from cmr import bundle
from cmr.server.ingest import Ingest
from cmr.store.memory.store import MemoryStore
from invoseq import wire
from tests.cmr.conftest import encode_batch, make_batch


def with_bad_utf8(body: bytes, text: bytes) -> bytes:
    """``body`` with the msgpack string ``text`` made invalid UTF-8 (same length)."""
    assert text in body
    return body.replace(text, b"\xff" * len(text), 1)


def test_ingest_counts_a_string_of_invalid_utf8_and_keeps_serving() -> None:
    store = MemoryStore()
    ingest = Ingest(store)
    header, body = encode_batch(make_batch(7, 1, {1: []}, host="myhost"))
    assert ingest.handle([header, with_bad_utf8(body, b"myhost")]) is None  # refused, no raise
    assert store.stats().rejected == {"decode": 1}
    assert ingest.handle([header, body]) == wire.Ack(7, 1)  # valid traffic goes on


def test_a_bundle_with_invalid_utf8_is_refused_in_one_line() -> None:
    body = bundle.Body(seq=bytes(16), exported_ns=0, exporter="invoseq cmr", entries=[])
    raw = with_bad_utf8(msgspec.msgpack.encode(body), b"invoseq cmr")
    with pytest.raises(bundle.BundleError, match="corrupt"):
        bundle.read_bundle(bundle.HEADER + zlib.compress(raw))

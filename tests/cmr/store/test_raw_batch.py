"""A batch decoded with its events left for the C pass (``cmr.store.raw_batch``) is refused exactly
when msgspec's typed decode of the whole ``wire.Batch`` refuses it, and indexed as that one is
otherwise: a Start or End the protocol does not allow (a negative id, an integer past 64 bits, a
float, a sequence id of another length or type, an event of another length, an unknown tag) is
refused by the C pass as msgspec refuses it, and a rarer event is decoded typed."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from cmr.server.ingest import DECODE, Ingest
from cmr.store import open_store
from cmr.store.base import InvalidBatchError
from cmr.store.batch_index import PackedBatch, pack
from cmr.store.raw_batch import RawBatch, header
from invoseq import wire
from tests.cmr.conftest import make_batch
from tests.cmr.store.test_packing import comparable

SEQ = bytes(range(16))
#: Values a field of a Start or End may hold on the wire, allowed or not.
VALUES = st.sampled_from([0, 1, 7, -1, -(2**63), 2**63 - 1, 2**64 - 1, 1.0, None, "7", b"7"])
SEQ_VALUES = st.sampled_from([SEQ, SEQ[:15], SEQ + b"\0", SEQ.decode("latin-1"), 7, None])


def start_like() -> st.SearchStrategy[list[object]]:
    valid = st.tuples(
        *(st.integers(0, 2**63 - 1) for _ in range(4)), st.integers(-(2**63), 2**63 - 1)
    )
    fields = st.one_of(valid.map(list), st.lists(VALUES, min_size=5, max_size=5))
    return st.builds(
        lambda tag, values, seq, extra: [tag, *values, seq, *extra],
        st.sampled_from([0, 0, 0, 1, 5, -1]),
        fields,
        st.one_of(st.just(SEQ), SEQ_VALUES),
        st.lists(VALUES, max_size=1),
    )


def end_like() -> st.SearchStrategy[list[object]]:
    return st.builds(
        lambda tag, iid, t, extra: [tag, iid, t, *extra],
        st.sampled_from([1, 1, 1, 0]),
        st.one_of(st.integers(1, 100), VALUES),
        st.one_of(st.integers(0, 10**9), VALUES),
        st.lists(VALUES, max_size=1),
    )


RARE = [
    msgspec.to_builtins(wire.Error(3, 10, "ValueError")),
    msgspec.to_builtins(wire.Handoff(9, 3, "thread", 2, 11, SEQ)),
    msgspec.to_builtins(wire.Attrs(3, {"k": "v"})),
    [2, -3, 10, "ValueError"],  # an Error with a negative iid: for msgspec to refuse
    [3, 9, 3, "x" * 17, 2, 11, SEQ],  # a Handoff of too long a kind
]


def body_of(events: list[object], tid: object = 1) -> bytes:
    """A batch message whose one chunk holds ``events`` (wire values, allowed or not)."""
    batch = msgspec.to_builtins(make_batch(5, 1, {}))
    batch[wire.Batch.__struct_fields__.index("chunks")] = [[tid, events]]
    return msgspec.msgpack.encode(batch)


def packed_typed(body: bytes) -> PackedBatch | None:
    """What the repository made of ``body`` decoded as ``wire.Batch``: None when refused."""
    try:
        return pack(msgspec.msgpack.decode(body, type=wire.Batch), body=body)
    except (msgspec.DecodeError, InvalidBatchError):
        return None


def packed_raw(body: bytes) -> PackedBatch | None:
    """The same with the events left for the C pass."""
    try:
        return pack(msgspec.msgpack.decode(body, type=RawBatch), body=body)
    except (msgspec.DecodeError, InvalidBatchError):
        return None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(start_like(), end_like(), st.sampled_from(RARE)), min_size=1, max_size=6),
    st.sampled_from([1, -1, 2**63]),
)
def test_a_raw_batch_is_refused_and_indexed_as_the_typed_one(
    events: list[object], tid: object
) -> None:
    body = body_of(events, tid)
    typed, raw = packed_typed(body), packed_raw(body)
    assert (raw is None) == (typed is None), events
    if typed is not None and raw is not None:
        assert comparable(raw) == comparable(typed)


def test_a_raw_batch_has_every_field_of_a_batch_as_a_batch_has_it() -> None:
    hints = typing.get_type_hints(wire.Batch, include_extras=True)
    raw_hints = typing.get_type_hints(RawBatch, include_extras=True)
    assert RawBatch.__struct_fields__ == wire.Batch.__struct_fields__

    def made(defaults: tuple[object, ...]) -> list[object]:  # a factory's value, compared
        return [getattr(d, "factory", lambda d=d: d)() for d in defaults]

    assert made(RawBatch.__struct_defaults__) == made(wire.Batch.__struct_defaults__)
    for name in wire.Batch.__struct_fields__:
        if name != "chunks":
            assert raw_hints[name] == hints[name], name
    batch = make_batch(5, 3, {1: [wire.Start(1, 0, 0, 1, 10, SEQ)]})
    raw = msgspec.msgpack.decode(msgspec.msgpack.encode(batch), type=RawBatch)
    assert header(raw) == msgspec.structs.replace(batch, chunks=[])


def test_a_batch_with_a_forbidden_start_is_refused_and_counted_and_the_others_stored(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path / "cmr.sqlite"))
    try:
        ingest = Ingest(store)
        good = body_of([[0, 1, 0, 0, 1, 10, SEQ], [1, 1, 20]])
        bad = body_of([[0, -1, 0, 0, 1, 10, SEQ], [1, 1, 20]])
        header_frame = wire.BATCH_HEADER
        acks = ingest.handle_many([[header_frame, bad], [header_frame, good]])
        assert acks[0] is None
        assert acks[1] is not None
        assert store.stats().rejected == {DECODE: 1}
    finally:
        store.close()


def test_a_chunk_of_more_events_than_the_protocol_allows_is_refused_either_way() -> None:
    events: list[object] = [[1, 1, 20]] * (wire.MAX_EVENTS_PER_CHUNK + 1)
    body = body_of(events)
    assert packed_typed(body) is None
    assert packed_raw(body) is None
    assert packed_raw(body_of(events[1:])) is not None

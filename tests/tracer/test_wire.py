"""The batch the sender encodes is laid out by name (``wire.batch_layout``), and what it lays out
decodes as ``wire.Batch``, field for field: the two cannot drift apart."""

from __future__ import annotations

import inspect

import msgspec

from invoseq import wire


def test_the_layouts_take_exactly_the_struct_fields_in_order() -> None:
    pairs = ((wire.batch_layout, wire.Batch), (wire.process_layout, wire.ProcessInfo))
    for layout, struct in pairs:
        assert tuple(inspect.signature(layout).parameters) == struct.__struct_fields__


def test_a_laid_out_batch_decodes_field_for_field() -> None:
    process = wire.process_layout(
        pid=42,
        host="web-1",
        platform_id="linux-x86_64",
        clock_offset_ns=-5,
        started_ns=7,
        argv=["app.py", "--port", "80"],
        heartbeat_ms=1000,
    )
    seq = bytes(range(16))
    body = wire.batch_layout(
        puid=9,
        batch_no=3,
        process=process,
        methods=[(1, "shop", "checkout", "/srv/shop.py", 12)],
        threads=[(1, 101, "MainThread")],
        chunks=[(1, [(wire.TAG_START, 1, 0, 0, 1, 100, seq), (wire.TAG_END, 1, 150)])],
        dropped=4,
        final=True,
        lost_seqs=[seq],
    )
    batch = msgspec.msgpack.decode(msgspec.msgpack.encode(body), type=wire.Batch)
    assert (batch.puid, batch.batch_no, batch.dropped, batch.final) == (9, 3, 4, True)
    assert batch.process == wire.ProcessInfo(
        42, "web-1", "linux-x86_64", -5, 7, ["app.py", "--port", "80"], 1000
    )
    assert batch.methods == [wire.MethodInfo(1, "shop", "checkout", "/srv/shop.py", 12)]
    assert batch.threads == [wire.ThreadInfo(1, 101, "MainThread")]
    [chunk] = batch.chunks
    assert chunk.events == [wire.Start(1, 0, 0, 1, 100, seq), wire.End(1, 150)]
    assert (batch.frames, batch.samples, batch.sampler, batch.lost_seqs) == ([], [], None, [seq])


def test_a_sampler_report_reads_across_versions_of_its_fields() -> None:
    """The paced interval's fields were appended with defaults: a report from an older sender
    reads with them 0, and an older repository reads a newer report, ignoring them."""

    class OlderReport(msgspec.Struct, array_like=True):
        mode: str
        interval_ms: int
        ticks: int
        late_ticks: int
        cost_ns: int

    older = msgspec.msgpack.encode(OlderReport("cpu", 10, 600, 3, 4_000_000))
    assert msgspec.msgpack.decode(older, type=wire.SamplerReport) == wire.SamplerReport(
        "cpu", 10, 600, 3, 4_000_000, 0, 0
    )
    newer = msgspec.msgpack.encode(wire.SamplerReport("wall", 10, 600, 3, 4_000_000, 15, 20))
    assert msgspec.msgpack.decode(newer, type=OlderReport) == OlderReport(
        "wall", 10, 600, 3, 4_000_000
    )

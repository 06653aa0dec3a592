"""`cmr export --format bundle` and `cmr import`: a sequence moved to another repository is the
same sequence there, and a file that is not a sound bundle changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import msgspec
import pytest

from cmr import bundle
from cmr.cli import main
from cmr.store import open_store
from cmr.store.base import SequenceData
from cmr.views.render.json import tree_to_json
from cmr.views.tree.calltree import build_tree
from invoseq import wire
from tests.cmr.conftest import FakeClock, make_batch
from tests.cmr.export_support import SEQ, SHOP, STOCK, fill


@pytest.fixture(name="source")
def fixture_source(tmp_path) -> str:
    path = str(tmp_path / "source.sqlite")
    store = open_store(path)
    try:
        fill(store)
    finally:
        store.close()
    return path


def run(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def export_bundle(capsys, db: str, target: Path) -> Path:
    run(capsys, "--db", db, "export", SEQ.hex()[:10], "--format", "bundle", "-o", str(target))
    return target


def test_an_imported_bundle_rebuilds_the_same_sequence(source, tmp_path, capsys):
    target = str(tmp_path / "target.sqlite")
    file = export_bundle(capsys, source, tmp_path / "seq.ivsq")

    out = run(capsys, "import", str(file), "--db", target)

    assert out == f"imported sequence {SEQ.hex()} (2 processes): 2 of 2 batches new\n"
    views = [
        ["show", SEQ.hex(), "--json"],
        ["show", SEQ.hex(), "--samples", "--json"],
        ["show", SEQ.hex(), "--threads", "--json"],
        ["ls", "--json"],
    ]
    for view in views:
        assert run(capsys, "--db", target, *view) == run(capsys, "--db", source, *view), view
    sampled = run(capsys, "--db", target, "show", SEQ.hex(), "--samples", "--json")
    assert '"kind":"estimated"' in sampled  # the samples came along
    # The process that ended is still ended, the silent one still lost, as the source says.
    before = json.loads(run(capsys, "--db", source, "stats", "--json"))["processes"]
    after = json.loads(run(capsys, "--db", target, "stats", "--json"))["processes"]
    assert after == before
    assert sorted(p["state"] for p in after) == ["ended", "lost"]


def test_a_bundle_keeps_every_record_of_the_sequence(tmp_path):
    clock = FakeClock()
    source, target = open_store(memory=True, clock=clock), open_store(memory=True, clock=clock)
    fill(source)
    original = source.load_sequence(SEQ)

    body = bundle.read_bundle(bundle.write_bundle(original))
    result = bundle.import_bundle(target, body)
    copy = target.load_sequence(SEQ)

    assert (result.seq, result.stored, result.processes) == (SEQ, 2, 2)
    assert_same_records(copy, original)
    assert original.samples  # the scenario is sampled: samples travel too
    assert tree_to_json(build_tree(copy)) == tree_to_json(build_tree(original))


def test_a_bundle_carries_the_samplers_gaps_and_its_samples_ticks() -> None:
    clock = FakeClock()
    source, target = open_store(memory=True, clock=clock), open_store(memory=True, clock=clock)
    fill(source)
    gap = wire.Sample(0, 2_000_000, 3, 6_000_000, 0, [], [])  # from 2 ms, no thread read for 6
    # Four ticks saw the stack, the first 0.1 ms into the sample, the last 0.9 ms.
    ticked = wire.Sample(2, 7_000_000, 4, 1_000_000, 0, [1, 2, 3], [995, 18, 44], 100_000, 900_000)
    assert source.ingest(make_batch(SHOP, 3, {}, methods={}, samples=[gap, ticked]), 1)
    original = source.load_sequence(SEQ)
    assert len(original.gaps) == 1
    assert any(s.ticks is not None for s in original.samples)

    bundle.import_bundle(target, bundle.read_bundle(bundle.write_bundle(original)))

    copy = target.load_sequence(SEQ)
    assert copy.gaps == original.gaps
    assert sorted_samples(copy) == sorted_samples(original)


def assert_same_records(copy: SequenceData, original: SequenceData) -> None:
    assert copy.seq == original.seq
    assert sorted_by_id(copy.invocations) == sorted_by_id(original.invocations)
    assert copy.methods == original.methods
    assert copy.threads == original.threads
    assert copy.processes == original.processes
    assert copy.handoffs == original.handoffs
    assert sorted_samples(copy) == sorted_samples(original)
    assert copy.frames == original.frames


def sorted_by_id(records: list) -> list:
    return sorted(records, key=lambda r: (r.puid, r.iid))


def sorted_samples(data: SequenceData) -> list:
    return sorted(data.samples, key=lambda s: (s.puid, s.tid, s.t_ns))


def test_a_large_sequence_travels_in_several_batches_per_process(monkeypatch):
    monkeypatch.setattr(bundle, "BATCH_ITEMS", 2)
    clock = FakeClock()
    source, target = open_store(memory=True, clock=clock), open_store(memory=True, clock=clock)
    fill(source)
    original = source.load_sequence(SEQ)

    body = bundle.read_bundle(bundle.write_bundle(original))
    bundle.import_bundle(target, body)

    assert len(body.entries) > 4
    assert [entry.batch.final for entry in body.entries if entry.batch.puid == SHOP][-1]
    assert not any(entry.batch.final for entry in body.entries if entry.batch.puid == STOCK)
    assert_same_records(target.load_sequence(SEQ), original)


def test_importing_a_bundle_again_stores_nothing_new(source, tmp_path, capsys):
    target = str(tmp_path / "target.sqlite")
    file = export_bundle(capsys, source, tmp_path / "seq.ivsq")
    run(capsys, "import", str(file), "--db", target)
    stats = run(capsys, "--db", target, "stats", "--json")
    tree = run(capsys, "--db", target, "show", SEQ.hex(), "--json")

    out = run(capsys, "import", str(file), "--db", target)

    assert out.endswith(": 0 of 2 batches new\n")
    again = json.loads(run(capsys, "--db", target, "stats", "--json"))
    first = json.loads(stats)
    assert (again["batches"], again["events"]) == (first["batches"], first["events"])
    assert run(capsys, "--db", target, "show", SEQ.hex(), "--json") == tree


def test_a_bundle_of_an_imported_sequence_is_the_same_bundle(source, tmp_path, capsys):
    """Re-exported elsewhere and brought back, a sequence is recognised as already there."""
    target = str(tmp_path / "target.sqlite")
    run(capsys, "import", str(export_bundle(capsys, source, tmp_path / "a.ivsq")), "--db", target)
    second = export_bundle(capsys, target, tmp_path / "b.ivsq")

    assert run(capsys, "import", str(second), "--db", target).endswith(": 0 of 2 batches new\n")


def test_importing_into_the_source_repository_changes_no_tree(source, tmp_path, capsys):
    tree = run(capsys, "--db", source, "show", SEQ.hex(), "--json")
    file = export_bundle(capsys, source, tmp_path / "seq.ivsq")

    run(capsys, "import", str(file), "--db", source)

    assert run(capsys, "--db", source, "show", SEQ.hex(), "--json") == tree


@pytest.mark.system
def test_a_bundle_pipes_from_export_to_import(source, tmp_path):
    target = tmp_path / "target.sqlite"
    command = [sys.executable, "-m", "cmr", "--db", source, "export", SEQ.hex()]
    exported = subprocess.run(
        [*command, "--format", "bundle", "-o", "-"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    imported = subprocess.run(
        [sys.executable, "-m", "cmr", "--db", str(target), "import", "-"],
        input=exported.stdout,
        capture_output=True,
        timeout=60,
        check=False,
    )

    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.decode().endswith(": 2 of 2 batches new\n")
    assert exported.stdout.startswith(bundle.MAGIC)


# -- bundles that are not sound -------------------------------------------------------------


def compressed(body: object) -> bytes:
    return bundle.HEADER + zlib.compress(msgspec.msgpack.encode(body))


def good_body() -> bundle.Body:
    return bundle.read_bundle(bundle.write_bundle(open_and_load()))


def with_batch(body: bundle.Body, change) -> bytes:
    entries = list(body.entries)
    entries[0] = bundle.Entry(entries[0].received_ns, change(entries[0].batch))
    return compressed(msgspec.structs.replace(body, entries=entries))


def offset_batch(batch: wire.Batch) -> wire.Batch:
    process = msgspec.structs.replace(batch.process, clock_offset_ns=5)
    return msgspec.structs.replace(batch, process=process)


def foreign_batch(batch: wire.Batch) -> wire.Batch:
    other = bytes(16 * [7])
    chunk = wire.ThreadChunk(9, [wire.Start(99, 0, 0, 1, 0, other)])
    return msgspec.structs.replace(batch, chunks=[*batch.chunks, chunk])


def long_name_batch(batch: wire.Batch) -> wire.Batch:
    method = wire.MethodInfo(1, "shop", "x" * 5_000, "/src/shop.py", 11)
    return msgspec.structs.replace(batch, methods=[method])


def bad_bundles() -> dict[str, tuple[bytes, str]]:
    good = bundle.write_bundle(open_and_load())
    body = good_body()
    return {
        "text": (b"seq,start\n1,2\n", "not an invoseq bundle"),
        "header only": (bundle.MAGIC, "not an invoseq bundle"),
        "newer format": (bundle.MAGIC + bytes((9, wire.PROTOCOL_VERSION)) + good[10:], "version 9"),
        "other protocol": (bundle.MAGIC + bytes((1, 1)) + good[10:], "protocol 1"),
        "truncated": (good[: len(good) // 2], "truncated"),
        "damaged": (bundle.HEADER + b"\x78\x9c" + b"\xff" * 40, "damaged"),
        "trailing bytes": (good + b"more", "bytes follow its compressed data"),
        "not a body": (compressed([1, 2, 3]), "the bundle is corrupt"),
        "no batches": (compressed(msgspec.structs.replace(body, entries=[])), "no batches"),
        "clock offset": (with_batch(body, offset_batch), "clock offset"),
        "other sequence": (with_batch(body, foreign_batch), "another sequence"),
        "over a wire limit": (with_batch(body, long_name_batch), "length <= 1024"),
    }


def open_and_load() -> SequenceData:
    store = open_store(memory=True)
    try:
        fill(store)
        return store.load_sequence(SEQ)
    finally:
        store.close()


BAD = bad_bundles()


@pytest.mark.parametrize("case", sorted(BAD))
def test_an_unsound_bundle_is_refused_in_one_line_and_changes_nothing(case, tmp_path, capsys):
    blob, message = BAD[case]
    file = tmp_path / "bad.ivsq"
    file.write_bytes(blob)
    target = tmp_path / "target.sqlite"

    line = one_line_error(capsys, ["--db", str(target), "import", str(file)])

    assert line.startswith(f"cmr: {file}: ")
    assert message in line
    assert not target.exists()


def test_a_decompression_bomb_is_refused():
    blob = bundle.HEADER + zlib.compress(b"\0" * 1_000_000)

    with pytest.raises(bundle.BundleError, match="larger than 1000 bytes uncompressed"):
        bundle.read_bundle(blob, max_body_bytes=1_000)


def test_a_missing_bundle_file_is_one_line(tmp_path, capsys):
    line = one_line_error(capsys, ["--db", str(tmp_path / "t.sqlite"), "import", "nope.ivsq"])

    assert line == "cmr: cannot read nope.ivsq: No such file or directory"

"""Lossy sequences as a user sees them: `cmr ls`, `cmr show` and `cmr stats` say which sequences
miss events and which process dropped them, and a bundle carries the mark to another repository."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from cmr.bundle import HEADER, BundleError, read_bundle, write_bundle
from cmr.cli import main
from cmr.store import open_store
from invoseq import wire

BatchFactory = Callable[..., wire.Batch]
MS = 1_000_000
LOSSY = bytes.fromhex("10" + "00" * 15)
WHOLE = bytes.fromhex("20" + "00" * 15)
SHOP = 0x1111
WORKER = 0x2222


@pytest.fixture(name="repo")
def fixture_repo(tmp_path: Path, make_batch: BatchFactory) -> str:
    """Two complete sequences of the shop; the worker dropped events of the first one, and
    reported its drops (cumulative) in two batches that arrived out of order."""
    path = str(tmp_path / "repo.sqlite")
    events = [
        wire.Start(1, 0, 0, 1, 0, LOSSY),
        wire.End(1, 10 * MS),
        wire.Start(2, 0, 0, 2, 20 * MS, WHOLE),
        wire.End(2, 30 * MS),
    ]
    names = {1: "shop.checkout", 2: "shop.browse"}
    store = open_store(path)
    try:
        store.ingest(make_batch(SHOP, 1, {1: events}, methods=names, pid=4242), 1)
        worker = {"host": "worker-1", "pid": 5151, "lost_seqs": [LOSSY]}
        store.ingest(make_batch(WORKER, 2, {}, dropped=300, **worker), 3)
        store.ingest(make_batch(WORKER, 1, {}, dropped=120, **worker), 2)
    finally:
        store.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_ls_json_says_which_sequences_are_lossy(
    repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(run(capsys, "--db", repo, "ls", "--json"))

    assert [(item["seq"], item["status"], item["lossy"]) for item in doc] == [
        (WHOLE.hex(), "complete", False),
        (LOSSY.hex(), "complete", True),
    ]


def test_ls_marks_a_lossy_sequence_in_its_status(
    repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    header, whole, lossy = run(capsys, "--db", repo, "ls").splitlines()

    status = header.index("STATUS")
    assert whole[status:].startswith("complete  ")
    assert lossy[status:].startswith("complete, lossy  ")


def test_show_json_says_lossy_and_who_dropped_events(
    repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lossy = json.loads(run(capsys, "--db", repo, "show", "10", "--json"))
    whole = json.loads(run(capsys, "--db", repo, "show", "20", "--json"))

    assert list(lossy)[:4] == ["seq", "status", "lossy", "dropped_by"]
    assert (lossy["status"], lossy["lossy"]) == ("complete", True)
    assert lossy["dropped_by"] == [{"host": "worker-1", "pid": 5151, "puid": WORKER}]
    assert lossy["root"]["name"] == "shop.checkout"
    assert (whole["lossy"], whole["dropped_by"]) == (False, [])


def test_show_notes_under_the_header_that_events_were_dropped(
    repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lossy = run(capsys, "--db", repo, "show", "10").splitlines()
    threads = run(capsys, "--db", repo, "show", "10", "--threads").splitlines()
    whole = run(capsys, "--db", repo, "show", "20").splitlines()

    note = "lossy: some events of this sequence were dropped by process worker-1:5151"
    assert lossy[0].startswith(LOSSY.hex() + "  complete")
    assert lossy[1] == note
    assert lossy[2].endswith("shop.checkout  self 10.0 ms  thread-1 (1) testhost:4242")
    assert threads[1] == note
    assert "lossy" not in "\n".join(whole)


def test_stats_json_keeps_the_largest_drop_count_each_process_reported(
    repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(run(capsys, "--db", repo, "stats", "--json"))

    dropped = {process["puid"]: process["dropped"] for process in doc["processes"]}
    assert dropped == {SHOP: 0, WORKER: 300}


def test_a_bundle_keeps_the_sequence_lossy_in_another_repository(
    repo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = str(tmp_path / "lossy.ivsq")
    copy = str(tmp_path / "copy.sqlite")
    run(capsys, "--db", repo, "export", "10", "--format", "bundle", "-o", bundle)
    run(capsys, "--db", copy, "import", bundle)

    doc = json.loads(run(capsys, "--db", copy, "show", "10", "--json"))

    assert doc["lossy"] is True
    assert doc["dropped_by"] == [{"host": "worker-1", "pid": 5151, "puid": WORKER}]


def test_a_bundle_that_marks_another_sequence_lossy_is_refused(
    repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(repo, readonly=True)
    try:
        body = read_bundle(write_bundle(store.load_sequence(LOSSY)))
    finally:
        store.close()
    entry = body.entries[-1]
    forged = msgspec.structs.replace(entry.batch, lost_seqs=[WHOLE])
    entries = [*body.entries[:-1], msgspec.structs.replace(entry, batch=forged)]
    blob = HEADER + zlib.compress(
        msgspec.msgpack.encode(msgspec.structs.replace(body, entries=entries))
    )

    with pytest.raises(BundleError, match=f"^the bundle of {LOSSY.hex()} marks another sequence"):
        read_bundle(blob)

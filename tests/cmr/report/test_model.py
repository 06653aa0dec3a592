"""``build_model`` and ``render_page`` on sequences written by hand, and ``cmr report``'s
command line: what the page is given, and that the page carries it without reaching out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cmr.report import build_model, render_page
from cmr.store import open_store
from cmr.store.base import SequenceData
from invoseq import wire
from tests.cmr.conftest import BatchFactory

SEQ = bytes.fromhex("5e" * 16)
MS = 1_000_000


def running_sequence(make_batch: BatchFactory) -> SequenceData:
    """``root`` (still running) on thread 1 hands ``work`` to thread 2, which raised; a third
    call on thread 1 has not ended either."""
    events = {
        1: [
            wire.Start(1, 0, 0, 1, 0, SEQ),
            wire.Handoff(77, 1, "thread", 2, 1 * MS, SEQ),
            wire.Start(4, 1, 0, 3, 8 * MS, SEQ),
        ],
        2: [
            wire.Start(2, 0, 77, 2, 3 * MS, SEQ),
            wire.Attrs(2, {"order.id": "A-17", "items": 3}),
            wire.Error(2, 5 * MS, "ValueError"),
        ],
    }
    batch = make_batch(9, 1, events, methods={1: "shop.root", 2: "shop.work", 3: "shop.wait"})
    store = open_store(memory=True)
    try:
        store.ingest(batch, batch.process.clock_offset_ns)
        return store.load_sequence(SEQ)
    finally:
        store.close()


def test_model_of_a_running_sequence(make_batch: BatchFactory) -> None:
    model = build_model(running_sequence(make_batch))
    summary = model["summary"]
    assert summary["seq"] == SEQ.hex()
    assert summary["root"] == "shop.root"
    assert summary["status"] == "running"
    assert summary["end_ns"] == 8 * MS  # the latest time the sequence shows
    assert [(lane["process"], lane["thread"]) for lane in model["lanes"]] == [
        ("testhost:4242", "thread-1"),
        ("testhost:4242", "thread-2"),
    ]
    bars = model["bars"]
    names = [model["names"][i] for i in bars["name"]]
    assert names == ["shop.root", "shop.work", "shop.wait"]  # preorder, by start
    assert bars["parent"] == [-1, 0, 0]
    assert bars["depth"] == [0, 1, 1]
    assert bars["lane"] == [0, 1, 0]
    assert bars["row"] == [0, 0, 1]  # on its own lane, the handed-off call is outermost
    assert bars["start"] == [0, 3 * MS, 8 * MS]
    assert bars["end"] == [8 * MS, 5 * MS, 8 * MS]  # open calls end at the latest time
    assert bars["open"] == [True, False, True]
    assert [model["statuses"][s] for s in bars["status"]] == ["running", "error", "running"]
    assert bars["error"] == [None, "ValueError", None]
    assert bars["iid"] == ["1", "2", "4"]
    assert bars["handoff"] == [None, "thread", None]
    assert bars["detached"] == [False, False, False]  # the root runs: nothing outlived it
    assert bars["attributes"] == [None, {"order.id": "A-17", "items": 3}, None]
    assert model["arrows"] == [
        {"from": 0, "to": 1, "kind": "thread", "submitted": 1 * MS, "start": 3 * MS,
         "queued": 2 * MS},
    ]  # fmt: skip
    # Running: the root waits for the call still running, and before it for the one that ended.
    assert model["critical"] == [0, 1, 2]
    flame = model["flame"]
    assert flame["weight"] == "time"  # no samples: the flame graph weighs time
    # An open call weighs what its callees account for: wait (open, no callees) weighs nothing.
    assert [model["names"][i] for i in flame["name"]] == ["shop.root", "shop.work"]
    assert flame["parent"] == [-1, 0]
    assert flame["value"] == [2 * MS, 2 * MS]
    json.dumps(model)  # plain JSON, as cmr ui serves it


def test_a_thread_the_root_did_not_wait_for_is_a_detached_bar(make_batch: BatchFactory) -> None:
    events = {
        1: [
            wire.Start(1, 0, 0, 1, 0, SEQ),
            wire.Handoff(77, 1, "thread", 2, 1 * MS, SEQ),
            wire.End(1, 4 * MS),
        ],
        2: [wire.Start(2, 1, 77, 2, 3 * MS, SEQ)],  # the writer runs on
    }
    batch = make_batch(9, 1, events, methods={1: "shop.root", 2: "shop.writer"})
    store = open_store(memory=True)
    try:
        store.ingest(batch, batch.process.clock_offset_ns)
        model = build_model(store.load_sequence(SEQ))
    finally:
        store.close()

    assert model["summary"]["status"] == "complete"
    bars = model["bars"]
    assert [model["statuses"][s] for s in bars["status"]] == ["ok", "running"]
    assert bars["detached"] == [False, True]


def test_page_inlines_everything_and_escapes_the_model(make_batch: BatchFactory) -> None:
    model = build_model(running_sequence(make_batch))
    model["names"][0] = "</script><script>alert(1)</script>"
    page = render_page(model)
    assert page.startswith("<!doctype html>")
    assert "</script><script>alert" not in page
    assert not re.search(r"""(src|href)\s*=|https?://|@import|url\(""", page)
    assert "connect-src 'none'" in page
    embedded = re.search(r'id="invoseq-model">(.*?)</script>', page, re.S)
    assert embedded is not None
    assert json.loads(embedded.group(1))["names"][0] == model["names"][0]
    assert '"liveUrl":null' in page


def test_a_live_page_may_poll_its_own_origin_while_the_sequence_runs(
    make_batch: BatchFactory,
) -> None:
    model = build_model(running_sequence(make_batch))
    page = render_page(model, live_url="/api/sequences/5e/model")
    assert '"liveUrl":"/api/sequences/5e/model"' in page
    assert "connect-src 'self'" in page
    model["summary"]["status"] = "complete"
    assert '"liveUrl":null' in render_page(model, live_url="/api/sequences/5e/model")


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmr", "report", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def stored(tmp_path: Path, make_batch: BatchFactory) -> Path:
    data = running_sequence(make_batch)
    db = tmp_path / "cmr.sqlite"
    store = open_store(str(db))
    try:
        batch = make_batch(9, 1, {1: [wire.Start(1, 0, 0, 1, 0, data.seq)]})
        store.ingest(batch, batch.process.clock_offset_ns)
    finally:
        store.close()
    return db


@pytest.mark.system
def test_cli_writes_the_page_to_a_file_or_to_stdout(
    tmp_path: Path, make_batch: BatchFactory
) -> None:
    db = stored(tmp_path, make_batch)
    target = tmp_path / "seq.html"
    written = report("5e5e", "-o", str(target), "--db", str(db))
    assert written.returncode == 0, written.stderr
    assert written.stderr == f"cmr: wrote {target}: open it in a browser\n"
    assert target.read_text().startswith("<!doctype html>")
    piped = report("5E5E5E", "-o", "-", "--db", str(db))
    assert piped.returncode == 0
    assert piped.stdout == target.read_text()


@pytest.mark.system
def test_cli_errors_are_one_line(tmp_path: Path, make_batch: BatchFactory) -> None:
    db = stored(tmp_path, make_batch)
    for args, message in [
        (["abc", "-o", "x.html", "--db", str(db)], "cmr: no sequence"),
        (["5e", "-o", str(tmp_path / "missing" / "x.html"), "--db", str(db)], "cmr: cannot write"),
        (["5e", "-o", "x.html", "--db", str(tmp_path / "nothing.sqlite")], "cmr: "),
    ]:
        result = report(*args)
        assert result.returncode == 1, result
        assert result.stderr.startswith(message), result.stderr
        assert result.stderr.count("\n") == 1
    assert report("5e", "--db", str(db)).returncode == 2  # -o is required


def test_estimated_bars_carry_their_bounds_for_the_whiskers() -> None:
    from tests.cmr.views.conftest import SequenceBuilder

    ms = 1_000_000
    b = SequenceBuilder()
    b.call("app.handle", 1, start=100 * ms, end=200 * ms, line=10)
    b.frame(1, "handle", line=10)
    b.frame(2, "work", line=20)
    b.sample(110 * ms, [1], duration=10 * ms, ticks=(115 * ms, 115 * ms))
    b.sample(120 * ms, [1, 2], duration=10 * ms, ticks=(125 * ms, 125 * ms))
    b.sample(130 * ms, [1], duration=10 * ms, ticks=(135 * ms, 135 * ms))
    bars = build_model(b.data())["bars"]
    kinds = ["measured", "estimated", "synthetic"]
    by_kind = {kinds[k]: i for i, k in enumerate(bars["kind"])}
    assert bars["bounds"][by_kind["measured"]] is None
    # seen by the tick at 125 ms, not by those at 115 and 135 ms; the page's times start at
    # the sequence's first call (100 ms)
    assert bars["bounds"][by_kind["estimated"]] == [15 * ms, 25 * ms, 25 * ms, 35 * ms]

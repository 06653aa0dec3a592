"""Printed ids always work: where a sequence id is printed shortened (``cmr ls``, ``cmr tail``,
the report ``tracer run`` prints, ``cmr ui``'s list, ``cmr show``'s links), it is the shortest
prefix of at least 12 hex digits that no other sequence in the repository shares, as git prints
commits, and every command taking an id accepts it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cmr.cli.tail import follow
from cmr.store import open_store
from cmr.ui.listing import render_list_page
from cmr.ui.query import parse_filter
from invoseq import wire
from tests.cmr.cli_helpers import run
from tests.cmr.conftest import BatchFactory
from tracer.run.summary import ReportOptions, render_report

MS = 1_000_000
PATIENCE_S = 60
#: Nine crafted ids sharing their first 12 hex digits, and one alone.
CRAFTED = [bytes.fromhex("abcdefabcdef" + f"{i:x}" + "0" * 19) for i in range(1, 10)]
ALONE = bytes.fromhex("12" * 16)


def batch(make_batch: BatchFactory, batch_no: int, seqs: list[bytes], **kwargs) -> wire.Batch:
    events = []
    for i, seq in enumerate(seqs, start=batch_no * 100 + 1):
        events += [wire.Start(i, 0, 0, 1, i * MS, seq), wire.End(i, i * MS + MS)]
    return make_batch(7, batch_no, {1: events}, methods={1: "shop.checkout"}, **kwargs)


@pytest.fixture(name="repo")
def fixture_repo(tmp_path: Path, make_batch: BatchFactory, clock_offset_ns: int) -> str:
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        assert store.ingest(batch(make_batch, 0, [*CRAFTED, ALONE]), clock_offset_ns)
    finally:
        store.close()
    return path


def seq_column(table: str) -> list[str]:
    return [line.split()[0] for line in table.splitlines()[1:]]


def test_ls_prints_prefixes_show_accepts_however_crowded(repo: str, capsys) -> None:
    code, out, _ = run(capsys, "ls", "--db", repo)
    assert code == 0
    printed = seq_column(out)
    assert sorted(printed) == sorted(
        [seq.hex()[:13] for seq in CRAFTED] + [ALONE.hex()[:12]]
    )  # one digit more than the nine share; the lone one keeps 12
    for prefix in printed:
        code, out, err = run(capsys, "show", prefix, "--db", repo)
        assert code == 0, err
        assert out.split()[0].startswith(prefix)


def test_the_report_tracer_run_prints_gives_prefixes_that_work(repo: str, capsys) -> None:
    text = render_report(ReportOptions(repo, started_ns=0, db_flag=None, patterns=("shop",)))
    listed = seq_column(text.split("\n\n")[1])
    hint = next(line for line in text.splitlines() if "cmr show" in line).split()[2]
    assert [len(prefix) for prefix in listed] == [
        13 if prefix.startswith("abcdef") else 12 for prefix in listed
    ]
    for prefix in [*listed, hint]:
        code, _, err = run(capsys, "show", prefix, "--db", repo)
        assert code == 0, err


def test_the_ui_list_shows_the_prefixes_ls_prints(repo: str) -> None:
    store = open_store(repo, readonly=True)
    try:
        lines = store.list_sequences(20)
        page = render_list_page(
            lines,
            parse_filter({}),
            repository=repo,
            now_ns=0,
            short_ids=store.short_ids([line.seq for line in lines]),
        )
    finally:
        store.close()
    for seq in CRAFTED:
        assert f"title='{seq.hex()}'>{seq.hex()[:13]}</a>" in page


def test_show_names_the_sequence_a_call_is_linked_from_by_a_prefix_that_works(
    repo: str, make_batch: BatchFactory, clock_offset_ns: int, capsys
) -> None:
    """A task queued by a call of ``CRAFTED[2]`` (a Celery task's link), in a sequence of its
    own: ``↪ linked from`` prints the prefix ``cmr ls`` would."""
    task = bytes.fromhex("7a" * 16)
    link = {"link.seq": CRAFTED[2].hex(), "link.iid": "00000000000000a7", "link.kind": "celery"}
    events = [wire.Start(1, 0, 0, 1, 0, task), wire.Attrs(1, link), wire.End(1, MS)]
    store = open_store(repo)
    try:
        store.ingest(make_batch(8, 0, {1: events}, methods={1: "tasks.ship"}), clock_offset_ns)
    finally:
        store.close()
    code, out, err = run(capsys, "show", task.hex()[:12], "--db", repo)
    assert code == 0, err
    assert f"↪ linked from {CRAFTED[2].hex()[:13]}:00000000000000a7 (celery)" in out
    code, out, err = run(capsys, "show", CRAFTED[2].hex()[:13], "--db", repo)
    assert code == 0, err


class _Lines:
    """A stdout that tells when a line is written."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()

    def write(self, text: str) -> int:
        with self.changed:
            self.lines += text.splitlines()
            self.changed.notify_all()
        return len(text)

    def flush(self) -> None:
        pass

    def wait_for(self, count: int) -> list[str]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.lines) >= count, PATIENCE_S)
            return list(self.lines)


def test_tail_prints_prefixes_unique_in_the_repository(
    tmp_path: Path, make_batch: BatchFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sequence completing while ``cmr tail`` follows, whose id shares 12 digits with one
    stored before."""
    offset = time.time_ns()  # tail follows the last minutes
    path = str(tmp_path / "repo.sqlite")
    writer = open_store(path)
    reader = open_store(path, readonly=True)
    out = _Lines()
    monkeypatch.setattr("sys.stdout", out)
    stop = threading.Event()
    follower = threading.Thread(
        target=follow, args=(reader, None, None), kwargs={"as_json": False, "stop": stop}
    )
    try:
        writer.ingest(batch(make_batch, 0, CRAFTED[:1], clock_offset_ns=offset), offset)
        follower.start()
        out.wait_for(1)  # the header: the first look is done
        writer.ingest(batch(make_batch, 1, CRAFTED[1:2], clock_offset_ns=offset), offset)
        header, line = out.wait_for(2)[:2]
    finally:
        stop.set()
        follower.join(PATIENCE_S)
        reader.close()
        writer.close()
    assert header.startswith("SEQ")
    assert line.split()[0] == CRAFTED[1].hex()[:13]

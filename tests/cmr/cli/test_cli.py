"""`cmr` as a user runs it: against a real SQLite repository, in-process and as a subprocess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import msgspec
import pytest
import zmq

from cmr.store import open_store
from cmr.views.pipeline import render_sequence
from cmr.views.render.tables import render_sequence_list
from invoseq import wire
from tests.cmr.cli_helpers import one_line_error, run

MS = 1_000_000
SEQ_A = bytes.fromhex("ab12" + "00" * 14)  # complete, one call raised
SEQ_B = bytes.fromhex("ab34" + "00" * 14)  # still running
SEQ_C = bytes.fromhex("c0ffee" + "00" * 13)  # its process ended with a call open, detached
SHOP = 0x1111
WORKER = 0x2222


@pytest.fixture(name="shop_batch")
def fixture_shop_batch(make_batch) -> wire.Batch:
    events = [
        wire.Start(1, 0, 0, 1, 0, SEQ_A),
        wire.Start(2, 1, 0, 2, 1 * MS, SEQ_A),
        wire.End(2, 4 * MS),
        wire.Start(3, 1, 0, 3, 5 * MS, SEQ_A),
        wire.Error(3, 9 * MS, "ValueError"),
        wire.End(1, 10 * MS),
        wire.Start(4, 0, 0, 4, 20 * MS, SEQ_B),
    ]
    names = {1: "shop.checkout", 2: "shop.price", 3: "shop.pay", 4: "shop.poll"}
    return make_batch(SHOP, 0, {1: events}, methods=names, pid=4242)


@pytest.fixture(name="worker_batch")
def fixture_worker_batch(make_batch) -> wire.Batch:
    events = [
        wire.Start(1, 0, 0, 1, 30 * MS, SEQ_C),
        wire.Start(2, 1, 0, 2, 30 * MS + 500_000, SEQ_C),
        wire.End(1, 31 * MS),
    ]
    names = {1: "worker.job", 2: "worker.step"}
    return make_batch(WORKER, 0, {1: events}, methods=names, pid=5151, final=True)


@pytest.fixture(name="repo")
def fixture_repo(tmp_path, shop_batch, worker_batch, clock_offset_ns) -> str:
    """A repository file holding three sequences, one duplicate batch and two rejected frames."""
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        assert store.ingest(shop_batch, clock_offset_ns)
        assert not store.ingest(shop_batch, clock_offset_ns)
        assert store.ingest(worker_batch, clock_offset_ns)
        store.record_rejected("garbage", 2)
    finally:
        store.close()
    return path


def test_ls_json_lists_sequences_newest_first(repo, capsys, clock_offset_ns):
    code, out, _ = run(capsys, "--db", repo, "ls", "--json")

    assert code == 0
    doc = json.loads(out)
    assert [entry["seq"] for entry in doc] == [SEQ_C.hex(), SEQ_B.hex(), SEQ_A.hex()]
    assert doc[2] == {
        "seq": SEQ_A.hex(),
        "root": "shop.checkout",
        "start_ns": clock_offset_ns,
        "duration_ns": 10 * MS,
        "invocations": 3,
        "threads": 1,
        "processes": 1,
        "status": "complete",
        "lossy": False,
        "error": None,
    }
    assert (doc[1]["status"], doc[1]["duration_ns"]) == ("running", None)
    # worker.job ended: the sequence is complete, though worker.step never will.
    assert (doc[0]["root"], doc[0]["status"], doc[0]["duration_ns"]) == (
        "worker.job",
        "complete",
        1 * MS,
    )


def test_ls_prints_a_table_with_short_ids_show_accepts(repo, capsys):
    code, out, _ = run(capsys, "ls", "--db", repo, "--limit", "2")

    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == [
        "SEQ",
        "START",
        "DURATION",
        "STATUS",
        "CALLS",
        "THREADS",
        "PROCS",
        "ROOT",
    ]
    assert len(rows) == 2
    assert rows[0].startswith("c0ffee000000  ")
    assert rows[0].split()[-5:] == ["complete", "2", "1", "1", "worker.job"]
    assert rows[1].split()[-5:] == ["running", "1", "1", "1", "shop.poll"]


def test_show_prints_the_tree_of_a_prefix(repo, capsys):
    code, out, err = run(capsys, "--db", repo, "show", "AB12")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{SEQ_A.hex()}  complete  10.0 ms  3 calls · 1 thread · 1 process",
        "10.0 ms  shop.checkout  self 3.00 ms  thread-1 (1) testhost:4242",
        "├─ 3.00 ms  shop.price  self 3.00 ms  thread-1 (1)",
        "└─ 4.00 ms  shop.pay  self 4.00 ms  thread-1 (1)  ✗ ValueError",
    ]


def test_show_marks_running_and_incomplete_calls(repo, capsys):
    assert "running  shop.poll" in run(capsys, "--db", repo, "show", "ab34")[1]
    lines = run(capsys, "--db", repo, "show", "c0f")[1].splitlines()
    assert lines[0].split("  ")[1] == "complete"  # its root ended
    assert lines[-1] == "└─ incomplete (process ended)  worker.step  thread-1 (1)  detached"


def test_show_json_follows_the_contract(repo, capsys, clock_offset_ns):
    code, out, _ = run(capsys, "--db", repo, "show", "ab12", "--json")

    assert code == 0
    doc = json.loads(out)
    assert list(doc) == ["seq", "status", "lossy", "dropped_by", "root"]
    assert (doc["seq"], doc["status"], doc["lossy"]) == (SEQ_A.hex(), "complete", False)
    root = doc["root"]
    assert root["process"] == {"host": "testhost", "pid": 4242, "puid": SHOP}
    assert root["thread"] == {"tid": 1, "name": "thread-1"}
    assert (root["start_ns"], root["end_ns"], root["duration_ns"], root["self_ns"]) == (
        clock_offset_ns,
        clock_offset_ns + 10 * MS,
        10 * MS,
        3 * MS,
    )
    assert [(c["name"], c["status"], c["error"]) for c in root["children"]] == [
        ("shop.price", "ok", None),
        ("shop.pay", "error", "ValueError"),
    ]


def test_depth_and_min_duration_apply_to_text_and_json(repo, capsys):
    doc = json.loads(run(capsys, "--db", repo, "show", "ab12", "--depth", "0", "--json")[1])
    assert doc["root"]["children"] == []

    doc = json.loads(
        run(capsys, "--db", repo, "show", "ab12", "--min-duration", "3.5", "--json")[1]
    )
    assert [child["name"] for child in doc["root"]["children"]] == ["shop.pay"]

    text = run(capsys, "--db", repo, "show", "ab12", "--min-duration", "3.5")[1]
    assert text.splitlines()[-2:] == [
        "├─ 4.00 ms  shop.pay  self 4.00 ms  thread-1 (1)  ✗ ValueError",
        "└─ … 1 call hidden",
    ]


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("ffff", "cmr: no sequence matches 'ffff'"),
        ("ab", "cmr: 'ab' matches 2 sequences: ab1200000000…, ab3400000000…; give more digits"),
        ("xyz", "cmr: 'xyz' is not a sequence id: give 1 to 32 hex digits"),
    ],
)
def test_a_bad_prefix_is_one_line_and_exit_1(repo, capsys, prefix, message):
    code, out, err = run(capsys, "--db", repo, "show", prefix)

    assert (code, out) == (1, "")
    assert one_line_error(err) == message


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "ab12", "--depth", "-1"],
        ["show", "ab12", "--depth", "two"],
        ["show", "ab12", "--min-duration", "-0.5"],
        ["show", "ab12", "--min-duration", "nan"],
        ["ls", "--min-duration", "12h"],  # a duration's units: us, ms, s, m
        ["ls", "--max-duration", "-3ms"],
        ["ls", "--min-duration", "9" * 400 + "ms"],  # infinite once a float
        ["ls", "--max-duration", "1e300"],  # beyond 64-bit nanoseconds
        ["ls", "--limit", "-3"],
        ["show"],
        ["frobnicate"],
    ],
)
def test_bad_options_are_one_line_usage_errors(repo, capsys, argv):
    code, out, err = run(capsys, "--db", repo, *argv)

    assert (code, out) == (2, "")
    line = one_line_error(err)
    assert "error:" in line
    assert "--help" in line


@pytest.mark.parametrize("command", [["ls"], ["show", "ab12"], ["stats"]])
def test_a_missing_repository_is_one_line_and_exit_1(tmp_path, capsys, command):
    missing = tmp_path / "nowhere" / "cmr.sqlite"

    code, out, err = run(capsys, "--db", str(missing), *command)

    assert (code, out) == (1, "")
    assert one_line_error(err).startswith(f"cmr: no repository at {missing}")
    assert not missing.parent.exists()  # reading never creates a repository


def test_the_repository_comes_from_invoseq_db_by_default(repo, capsys, monkeypatch):
    monkeypatch.setenv("INVOSEQ_DB", repo)

    code, out, _ = run(capsys, "ls", "--json")

    assert code == 0
    assert len(json.loads(out)) == 3


def test_stats_json_counts_batches_events_rejects_and_processes(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "stats", "--json")

    assert code == 0
    doc = json.loads(out)
    assert (doc["batches"], doc["duplicate_batches"], doc["events"]) == (2, 1, 10)
    assert doc["rejected"] == {"garbage": 2}
    processes = {p["puid"]: p for p in doc["processes"]}
    assert set(processes) == {SHOP, WORKER}
    assert (processes[SHOP]["ended"], processes[WORKER]["ended"]) == (False, True)
    assert (processes[SHOP]["state"], processes[WORKER]["state"]) == ("alive", "ended")
    assert (processes[WORKER]["host"], processes[WORKER]["pid"]) == ("testhost", 5151)
    assert processes[WORKER]["dropped"] == 0


def test_stats_text(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "stats")

    assert code == 0
    assert "duplicate batches  1" in out
    assert "rejected frames    garbage 2" in out
    rows = {
        cells[0]: cells
        for cells in (re.split(r"\s{2,}", line) for line in out.splitlines())
        if cells[0].startswith("testhost:")
    }
    # PROCESS, PUID, DROPPED, HEARTBEAT ("-": none promised), LAST SEEN, STATE
    assert [rows["testhost:4242"][i] for i in (1, 2, 3, 5)] == [f"{SHOP:016x}", "0", "-", "alive"]
    assert [rows["testhost:5151"][i] for i in (3, 5)] == ["-", "ended"]


@pytest.mark.parametrize("command", [[], ["serve"], ["ls"], ["show"], ["stats"]])
def test_every_command_explains_itself(capsys, command):
    code, out, _ = run(capsys, *command, "--help")

    assert code == 0
    assert out.startswith(f"usage: cmr {' '.join(command)}".rstrip())
    assert "examples:" in out


def test_no_command_prints_help_and_exits_2(capsys):
    code, out, err = run(capsys)

    assert (code, out) == (2, "")
    assert "serve" in err
    assert "show" in err


def test_memory_and_db_together_are_refused(capsys, tmp_path):
    code, _, err = run(capsys, "--db", str(tmp_path / "x.sqlite"), "serve", "--memory")

    assert code == 1
    assert one_line_error(err) == "cmr: --memory keeps nothing on disk: leave out --db"
    assert not (tmp_path / "x.sqlite").exists()


def test_render_functions_match_what_the_cli_prints(shop_batch, clock_offset_ns):
    store = open_store(memory=True)
    try:
        store.ingest(shop_batch, clock_offset_ns)
        text = render_sequence(store, SEQ_A)
        table = render_sequence_list(store.list_sequences(10))
        assert render_sequence(store, SEQ_A, depth=0).splitlines()[-1] == "└─ … 2 calls hidden"
        coloured = render_sequence(store, SEQ_A, color=True)
    finally:
        store.close()

    assert (
        text.splitlines()[1] == "10.0 ms  shop.checkout  self 3.00 ms  thread-1 (1) testhost:4242"
    )
    assert "\033[" in coloured
    assert table.splitlines()[1].startswith("ab3400000000")
    assert render_sequence_list([]) == "no sequences recorded yet"


def cmr(*argv: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmr", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kwargs,
    )


@pytest.mark.system
def test_python_m_cmr_prints_the_same_tree(repo, capsys):
    in_process = run(capsys, "--db", repo, "show", "ab12")[1]

    result = cmr("--db", repo, "show", "ab12")

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == in_process
    failed = cmr("--db", repo, "show", "ffff")
    assert failed.returncode == 1
    assert failed.stderr == "cmr: no sequence matches 'ffff'\n"


@pytest.mark.system
def test_a_terminal_without_box_characters_gets_replacements_not_a_traceback(repo):
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}

    result = cmr("--db", repo, "show", "ab12", env=env, encoding="latin-1")

    assert (result.returncode, result.stderr) == (0, "")
    assert (
        result.stdout.splitlines()[-1]
        == "?? 4.00 ms  shop.pay  self 4.00 ms  thread-1 (1)  ? ValueError"
    )


@pytest.mark.system
def test_serve_receives_batches_that_ls_then_lists(tmp_path, capsys, shop_batch, encode_batch):
    path = str(tmp_path / "served.sqlite")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cmr", "serve", "--db", path, "--bind", "tcp://127.0.0.1:*"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("cmr: listening on tcp://127.0.0.1:"), ready
        dealer.connect(ready.split()[-1])
        dealer.send_multipart(encode_batch(shop_batch))
        assert dealer.poll(30_000), "no acknowledgement from cmr serve"
        header, body = dealer.recv_multipart()
        assert header == wire.ACK_HEADER
        assert msgspec.msgpack.decode(body, type=wire.Ack) == wire.Ack(SHOP, 0)

        code, out, _ = run(capsys, "--db", path, "ls", "--json")
        assert code == 0
        assert {entry["seq"] for entry in json.loads(out)} == {SEQ_A.hex(), SEQ_B.hex()}

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in proc.stderr.read() if proc.stderr else True
    finally:
        dealer.close()
        context.term()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert os.path.exists(path)

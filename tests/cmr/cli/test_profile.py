"""`cmr show --samples`, `cmr profile` and the sampler's part of `cmr stats`, as a user runs them
against a real SQLite repository."""

from __future__ import annotations

import json
import re

import pytest

from cmr.cli.common import parse_since
from cmr.store import open_store
from invoseq import wire
from tests.cmr.cli_helpers import one_line_error, run

MS = 1_000_000
SEQ_P = bytes.fromhex("ab12" + "00" * 14)  # checkout calling price three times, sampled
SEQ_Q = bytes.fromhex("cd34" + "00" * 14)  # price handing fetch to a pool thread, sampled
SHOP = 0x1111
WORKER = 0x2222
HID = 0x5EED


@pytest.fixture(name="repo")
def fixture_repo(tmp_path, make_batch, clock_offset_ns) -> str:
    shop = make_batch(
        SHOP,
        1,
        {
            1: [
                wire.Start(1, 0, 0, 1, 0, SEQ_P),
                *[
                    event
                    for iid, begin in ((2, 10), (3, 30), (4, 50))
                    for event in (
                        wire.Start(iid, 1, 0, 2, begin * MS, SEQ_P),
                        wire.End(iid, (begin + 10) * MS),
                    )
                ],
                wire.End(1, 100 * MS),
            ]
        },
        methods={1: "shop.checkout", 2: "shop.price"},  # first lines 11 and 12 of /src/shop.py
        frames=[
            wire.FrameInfo(1, "/src/shop.py", "checkout", 11),
            wire.FrameInfo(2, "/src/shop.py", "price", 12),
            wire.FrameInfo(3, "/srv/db/query.py", "lookup", 40),
        ],
        samples=[
            # Ticks at 14, 34 and 75 ms (2, 2 and 5 ms into each sample).
            wire.Sample(1, 12 * MS, 1, 5 * MS, 5 * MS, [1, 2, 3], [15, 13, 41], 2 * MS, 2 * MS),
            wire.Sample(1, 32 * MS, 1, 5 * MS, 0, [1, 2, 3], [15, 13, 44], 2 * MS, 2 * MS),
            wire.Sample(1, 70 * MS, 1, 10 * MS, 10 * MS, [1], [20], 5 * MS, 5 * MS),
        ],
        sampler=wire.SamplerReport("wall", 5, 40, 2, 3 * MS, 6 * MS, 8 * MS, 11),
    )
    worker = make_batch(
        WORKER,
        1,
        {
            1: [
                wire.Start(1, 0, 0, 2, 200 * MS, SEQ_Q),
                # The hand-off names the callable with an id of its own (6), as the tracer does
                # for a traced function: fetch's Start carries the function's id (3).
                wire.Handoff(HID, 1, "thread", 6, 201 * MS, SEQ_Q),
                wire.End(1, 230 * MS),
            ],
            2: [wire.Start(2, 1, HID, 3, 205 * MS, SEQ_Q), wire.End(2, 225 * MS)],
        },
        methods={2: "shop.price", 3: "shop.fetch", 6: "shop.fetch"},  # first line 13 for fetch
        frames=[
            wire.FrameInfo(4, "/src/shop.py", "fetch", 13),
            wire.FrameInfo(5, "/usr/lib/python3.11/socket.py", "recv", 300),
            wire.FrameInfo(9, "/usr/lib/python3.11/concurrent/futures/thread.py", "_worker", 60),
        ],
        samples=[wire.Sample(2, 210 * MS, 1, 10 * MS, 1 * MS, [9, 4, 5], [80, 14, 301])],
        pid=5151,
    )
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        assert store.ingest(shop, clock_offset_ns)
        assert store.ingest(worker, clock_offset_ns)
    finally:
        store.close()
    return path


def test_show_samples_interleaves_the_estimated_frames(repo, capsys):
    plain = run(capsys, "--db", repo, "show", "ab12")[1]
    code, out, err = run(capsys, "--db", repo, "show", "ab12", "--samples")

    assert (code, err) == (0, "")
    assert "~" not in plain
    assert "sample" not in plain
    assert out.splitlines() == [
        f"{SEQ_P.hex()}  complete  100 ms  4 calls · 1 thread · 1 process · 3 samples",
        "100 ms  shop.checkout  self 70.0 ms  thread-1 (1) testhost:4242  3 samples",
        # Each lookup: started after its call (no tick before it there) and by its tick,
        # ended after the tick and by its call's end: [10, 14] and [14, 20] ms, ±5 ms.
        "├─ 10.0 ms  shop.price  self 5.00 ms  thread-1 (1)  1 sample",
        "│  └─ ~5.00 ms (±5.00 ms)  lookup  db/query.py:40  self 5.00 ms  1 sample",
        "├─ 10.0 ms  shop.price  self 5.00 ms  thread-1 (1)  1 sample",
        "│  └─ ~5.00 ms (±5.00 ms)  lookup  db/query.py:40  self 5.00 ms  1 sample",
        "└─ 10.0 ms  shop.price  self 10.0 ms  thread-1 (1)",
    ]


def test_show_samples_json_marks_estimated_nodes_and_counts_samples_on_every_node(repo, capsys):
    doc = json.loads(run(capsys, "--db", repo, "show", "cd34", "--samples", "--json")[1])

    root = doc["root"]
    (fetch,) = root["children"]
    (recv,) = fetch["children"]
    assert (root["samples"], fetch["samples"]) == (
        {"total": 1, "self": 0, "cpu_ns": 1 * MS},
        {"total": 1, "self": 0, "cpu_ns": 1 * MS},
    )
    assert (recv["kind"], recv["name"], recv["thread"]["tid"]) == ("estimated", "recv", 2)
    assert recv["frame"] == {
        "file": "/usr/lib/python3.11/socket.py",
        "function": "recv",
        "line": 300,
    }
    assert recv["samples"] == {"total": 1, "self": 1, "cpu_ns": 1 * MS}
    plain = json.loads(run(capsys, "--db", repo, "show", "cd34", "--json")[1])["root"]
    assert (plain["samples"], plain["children"][0]["children"]) == (None, [])


def test_show_threads_refuses_samples(repo, capsys):
    code, out, err = run(capsys, "--db", repo, "show", "ab12", "--threads", "--samples")

    assert (code, out) == (1, "")
    assert one_line_error(err) == "cmr: --threads counts calls, not samples: leave out --samples"


def test_profile_of_a_sequence_merges_its_repeated_calls(repo, capsys):
    code, out, err = run(capsys, "--db", repo, "profile", "ab12")

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"profile of sequence {SEQ_P.hex()}",
        "1 sequence · 3 samples",
        "100 ms  shop.checkout  self 70.0 ms  on-CPU 15.0 ms  off-CPU 85.0 ms  3 samples (1 self)",
        "└─ 30.0 ms  shop.price  3 calls  self 20.0 ms  on-CPU 5.00 ms  off-CPU 25.0 ms  2 samples",
        "   └─ ~10.0 ms  lookup  db/query.py:40  2 calls  self 10.0 ms  on-CPU 5.00 ms  "
        "off-CPU 5.00 ms  2 samples (2 self)",
    ]


def test_profile_lines_splits_frames_by_the_line_they_were_executing(repo, capsys):
    doc = json.loads(run(capsys, "--db", repo, "profile", "ab12", "--lines", "--json")[1])

    (price,) = doc["roots"][0]["children"]
    assert [(child["name"], child["frame"]["line"]) for child in price["children"]] == [
        ("lookup", 41),
        ("lookup", 44),
    ]
    assert doc["lines"] is True


def test_profile_of_a_method_folds_its_calls_across_sequences(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "profile", "--method", "shop.price")

    assert code == 0
    assert out.splitlines() == [
        "profile of shop.price",
        "2 sequences · 3 samples",
        "60.0 ms  shop.price  4 calls  self 30.0 ms  on-CPU 6.00 ms  off-CPU 54.0 ms  3 samples",
        "├─ 20.0 ms  shop.fetch  self 10.0 ms  on-CPU 1.00 ms  off-CPU 19.0 ms  1 sample",
        "│  └─ ~10.0 ms  recv  python3.11/socket.py:300  self 10.0 ms  on-CPU 1.00 ms  "
        "off-CPU 9.00 ms  1 sample (1 self)",
        "└─ ~10.0 ms  lookup  db/query.py:40  2 calls  self 10.0 ms  on-CPU 5.00 ms  "
        "off-CPU 5.00 ms  2 samples (2 self)",
    ]


def test_profile_of_a_method_json_limit_and_since(repo, capsys, clock_offset_ns):
    doc = json.loads(run(capsys, "--db", repo, "profile", "--method", "price", "--json")[1])
    assert (doc["method"], doc["sequences"], doc["seq"], doc["since_ns"]) == (
        "price",
        2,
        None,
        None,
    )
    (root,) = doc["roots"]
    assert (root["name"], root["calls"], root["time_ns"], root["samples"]) == (
        "shop.price",
        4,
        60 * MS,
        3,
    )

    newest = json.loads(
        run(capsys, "--db", repo, "profile", "--method", "price", "--limit", "1", "--json")[1]
    )
    assert (newest["sequences"], newest["roots"][0]["calls"]) == (1, 1)  # SEQ_Q started last

    since = "2023-11-14T22:13:20.100+00:00"  # between SEQ_P's start and SEQ_Q's
    assert clock_offset_ns == 1_700_000_000 * 10**9  # 2023-11-14T22:13:20Z
    late = json.loads(
        run(capsys, "--db", repo, "profile", "--method", "price", "--since", since, "--json")[1]
    )
    assert (late["sequences"], late["since_ns"]) == (1, clock_offset_ns + 100 * MS)

    code, out, _ = run(capsys, "--db", repo, "profile", "--method", "shop.nothing")
    assert code == 0
    assert out.splitlines() == [
        "profile of shop.nothing",
        "0 sequences · 0 samples",
        "nothing to profile",
    ]


def test_profile_by_thread_gives_each_thread_its_root(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "profile", "--method", "shop.price", "--by-thread")

    assert code == 0
    roots = [line for line in out.splitlines()[2:] if not line.startswith(("├", "│", "└", " "))]
    assert roots == [
        "30.0 ms  thread-1 (1) testhost:4242  on-CPU 5.00 ms  off-CPU 25.0 ms  2 samples",
        "30.0 ms  thread-1 (1) testhost:5151",  # no sample fell on it
        "20.0 ms  thread-2 (2) testhost:5151  on-CPU 1.00 ms  off-CPU 19.0 ms  1 sample",
    ]
    doc = json.loads(run(capsys, "--db", repo, "profile", "cd34", "--by-thread", "--json")[1])
    assert [(root["kind"], root["thread"]["tid"], root["time_ns"]) for root in doc["roots"]] == [
        ("thread", 1, 30 * MS),
        ("thread", 2, 20 * MS),
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "cmr: give a sequence id or --method NAME (one of them)"),
        (
            ["ab12", "--method", "shop.price"],
            "cmr: give a sequence id or --method NAME (one of them)",
        ),
        (
            ["ab12", "--limit", "3"],
            "cmr: --since and --limit choose sequences for --method: leave them out",
        ),
        (["ffff"], "cmr: no sequence matches 'ffff'"),
    ],
)
def test_profile_mistakes_are_one_line_and_exit_1(repo, capsys, argv, message):
    code, out, err = run(capsys, "--db", repo, "profile", *argv)

    assert (code, out) == (1, "")
    assert one_line_error(err) == message


@pytest.mark.parametrize("since", ["yesterday", "10x", "-5m", "2023-13-01"])
def test_a_bad_since_is_a_usage_error(repo, capsys, since):
    code, out, err = run(capsys, "--db", repo, "profile", "--method", "x", f"--since={since}")

    assert (code, out) == (2, "")
    assert (
        "expected an age (a number and a unit s, m, h, d or w (90m, 1.5h, 7d, 2w)) or an ISO time"
        in one_line_error(err)
    )


@pytest.mark.parametrize(
    ("text", "ago_s"),
    [("30s", 30), ("15m", 900), ("1h", 3600), ("2d", 172_800), ("1w", 604_800), ("1.5h", 5400)],
)
def test_since_counts_back_from_now(text, ago_s):
    now = 1_800_000_000 * 10**9

    assert parse_since(text, now_ns=now) == now - ago_s * 10**9


def test_since_reads_iso_times_in_their_zone_or_else_local_time():
    assert parse_since("2023-11-14T22:13:20Z") == 1_700_000_000 * 10**9
    assert parse_since("2023-11-14T23:13:20.5+01:00") == 1_700_000_000 * 10**9 + 500 * MS
    naive = parse_since("2023-11-14T22:13:20")
    assert abs(naive - 1_700_000_000 * 10**9) <= 14 * 3600 * 10**9  # local time, some zone


def test_profile_explains_itself(capsys):
    code, out, _ = run(capsys, "profile", "--help")

    assert code == 0
    assert out.startswith("usage: cmr profile")
    for option in ("--method", "--since", "--limit", "--by-thread", "--lines", "--json"):
        assert option in out
    assert "cmr profile --method shop.checkout --since 1h" in out


def test_stats_count_samples_and_show_each_sampler(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "stats")

    assert code == 0
    assert "samples            4" in out
    header, row = (re.split(r"\s{2,}", line) for line in out.splitlines()[-2:])
    assert header == [
        "PROCESS",
        "PUID",
        "SAMPLER",
        "PACED (LONGEST)",
        "TICKS",
        "LATE",
        "COST",
        "DROPPED",
    ]
    assert row == [
        "testhost:4242",
        f"{SHOP:016x}",
        "wall 5.00 ms",
        "6.00 ms (8.00 ms)",
        "40",
        "2",
        "3.00 ms",
        "11",  # samples the sampler refused while its queue to the sender was full
    ]

    doc = json.loads(run(capsys, "--db", repo, "stats", "--json")[1])
    assert doc["samples"] == 4
    samplers = {p["puid"]: p["sampler"] for p in doc["processes"]}
    assert samplers == {
        SHOP: {
            "mode": "wall",
            "interval_ms": 5,
            "ticks": 40,
            "late_ticks": 2,
            "cost_ns": 3 * MS,
            "current_interval_ns": 6 * MS,
            "longest_interval_ns": 8 * MS,
            "dropped_samples": 11,
        },
        WORKER: None,
    }

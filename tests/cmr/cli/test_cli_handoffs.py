"""`cmr show` and `cmr ls` of sequences that cross threads, tasks and processes: hand-offs,
the threads view, a remote parent and a lost process."""

from __future__ import annotations

import json
import re

import pytest

from cmr.store import open_store
from cmr.views.render.terms import format_time_of_day
from invoseq import wire
from tests.cmr.cli_helpers import one_line_error, run

MS = 1_000_000
SHOP = 0x1111


SEQ_D = bytes.fromhex("d0d0" + "00" * 14)  # work handed to a pool thread and to asyncio tasks
HID_POOL = 0x7001
HID_TASK = 0x7002


@pytest.fixture(name="handoff_repo")
def fixture_handoff_repo(tmp_path, make_batch, clock_offset_ns) -> str:
    """checkout (MainThread) hands fetch to a pool thread (queued 3.20 ms) and an untraced
    coroutine making two traced calls to an asyncio task (queued 120 µs, then 1.12 ms). The pool
    thread's events come in an earlier batch than the Handoff that explains them."""
    names = {1: "shop.checkout", 2: "shop.fetch", 3: "shop.notify", 4: "shop.audit", 9: "shop.job"}
    pool = [
        wire.Start(2, 1, HID_POOL, 2, 4_200_000, SEQ_D),
        wire.End(2, 9 * MS),
    ]
    main_thread = [
        wire.Start(1, 0, 0, 1, 0, SEQ_D),
        wire.Handoff(HID_POOL, 1, "thread", 9, 1 * MS, SEQ_D),
        wire.Handoff(HID_TASK, 1, "task", 9, 10 * MS, SEQ_D),
        wire.Start(3, 1, HID_TASK, 3, 10 * MS + 120_000, SEQ_D),
        wire.End(3, 11 * MS),
        wire.Start(4, 1, HID_TASK, 4, 11 * MS + 120_000, SEQ_D),
        wire.End(4, 12 * MS),
        wire.End(1, 20 * MS),
    ]
    path = str(tmp_path / "handoffs.sqlite")
    store = open_store(path)
    try:
        store.ingest(make_batch(SHOP, 1, {1: [main_thread[0]], 2: pool}, methods=names), 0)
        store.ingest(make_batch(SHOP, 2, {1: main_thread[1:]}, methods=names), 0)
    finally:
        store.close()
    return path


def test_show_marks_each_hop_to_another_thread_or_task(handoff_repo, capsys):
    code, out, _ = run(capsys, "--db", handoff_repo, "show", "d0d0")

    assert code == 0
    assert out.splitlines() == [
        f"{SEQ_D.hex()}  complete  20.0 ms  4 calls · 2 threads · 1 process",
        "20.0 ms  shop.checkout  self 13.4 ms  thread-1 (1) testhost:4242",
        '├─ 4.80 ms  shop.fetch  self 4.80 ms  thread-2 (2)  → thread "thread-2", queued 3.20 ms',
        "├─ 880 µs  shop.notify  self 880 µs  thread-1 (1)  → task, queued 120 µs",
        "└─ 880 µs  shop.audit  self 880 µs  thread-1 (1)  → task, queued 1.12 ms",
    ]


def test_show_json_carries_the_hand_off(handoff_repo, capsys, clock_offset_ns):
    doc = json.loads(run(capsys, "--db", handoff_repo, "show", "d0d0", "--json")[1])

    fetch, notify, audit = doc["root"]["children"]
    assert doc["root"]["handoff"] is None
    assert fetch["handoff"] == {
        "kind": "thread",
        "queued_ns": 3_200_000,
        "submitted_ns": clock_offset_ns + 1 * MS,
    }
    assert (notify["handoff"]["kind"], notify["handoff"]["queued_ns"]) == ("task", 120_000)
    assert audit["handoff"]["submitted_ns"] == notify["handoff"]["submitted_ns"]


def test_show_threads_lists_each_thread_with_calls_and_busy_time(handoff_repo, capsys):
    code, out, _ = run(capsys, "--db", handoff_repo, "show", "d0d0", "--threads")

    assert code == 0
    assert out.splitlines() == [
        f"{SEQ_D.hex()}  complete  20.0 ms  4 calls · 2 threads · 1 process",
        "PROCESS        TID  THREAD    CALLS     BUSY     FIRST",
        "testhost:4242    1  thread-1      3  20.0 ms     +0 ns",
        "testhost:4242    2  thread-2      1  4.80 ms  +4.20 ms",
    ]


def test_show_threads_json(handoff_repo, capsys, clock_offset_ns):
    code, out, _ = run(capsys, "--db", handoff_repo, "show", "d0d0", "--threads", "--json")

    assert code == 0
    process = {"host": "testhost", "pid": 4242, "puid": SHOP}
    assert json.loads(out) == [
        {
            "process": process,
            "thread": {"tid": 1, "name": "thread-1"},
            "invocations": 3,
            "busy_ns": 20 * MS,
            "first_start_ns": clock_offset_ns,
        },
        {
            "process": process,
            "thread": {"tid": 2, "name": "thread-2"},
            "invocations": 1,
            "busy_ns": 4_800_000,
            "first_start_ns": clock_offset_ns + 4_200_000,
        },
    ]


@pytest.mark.parametrize("view", [["--depth", "0"], ["--min-duration", "1"]])
def test_threads_refuses_views_that_would_hide_calls(handoff_repo, capsys, view):
    code, out, err = run(capsys, "--db", handoff_repo, "show", "d0d0", "--threads", *view)

    assert (code, out) == (1, "")
    assert one_line_error(err) == (
        "cmr: --threads counts every call: leave out --depth and --min-duration"
    )


def test_show_help_offers_the_threads_view(capsys):
    code, out, _ = run(capsys, "show", "--help")

    assert code == 0
    assert "--threads" in out
    assert "cmr show 3f2a9c --threads" in out


SEQ_E = bytes.fromhex("e0e0" + "00" * 14)  # entered from a foreign system, then lost
API = 0x3333
JOBS = 0x4444
FOREIGN = 0xF0F0  # the parent-id of the foreign caller's traceparent
HID_JOB = 0x7003


@pytest.fixture(name="remote_repo")
def fixture_remote_repo(tmp_path, make_batch) -> str:
    """A foreign system called api.handle (process API on host "api", heartbeat 100 ms), which
    handed a job to process JOBS on host "jobs" (queued 3.20 ms) and then went silent in 1970, so
    it is lost by any clock's reckoning. JOBS finished its part."""
    api = [
        wire.Start(1, 0, FOREIGN, 1, 0, SEQ_E),
        wire.Handoff(HID_JOB, 1, "process", 9, 1 * MS, SEQ_E),
        wire.Start(2, 1, 0, 2, 2 * MS, SEQ_E),
    ]
    jobs = [wire.Start(1, 0, HID_JOB, 3, 4_200_000, SEQ_E), wire.End(1, 9 * MS)]
    names = {1: "api.handle", 2: "api.render", 3: "jobs.run", 9: "jobs.run"}
    path = str(tmp_path / "remote.sqlite")
    store = open_store(path)
    try:
        batch = make_batch(API, 1, {1: api}, methods=names, pid=80, host="api", heartbeat_ms=100)
        store.ingest(batch, 0)
        store.ingest(make_batch(JOBS, 1, {1: jobs}, methods=names, pid=90, host="jobs"), 0)
    finally:
        store.close()
    return path


def test_show_labels_every_call_of_a_multi_process_sequence_and_says_why_calls_never_end(
    remote_repo, capsys
):
    code, out, _ = run(capsys, "--db", remote_repo, "show", "e0e0")

    assert code == 0
    lost = f"incomplete (process lost, last seen {format_time_of_day(0)})"
    assert out.splitlines() == [
        f"{SEQ_E.hex()}  incomplete  3 calls · 2 threads · 2 processes",
        "incomplete  <remote parent>",
        f"└─ {lost}  api.handle  thread-1 (1) api:80  → remote",
        f"   ├─ {lost}  api.render  thread-1 (1) api:80",
        "   └─ 4.80 ms  jobs.run  self 4.80 ms  thread-1 (1) jobs:90"
        "  → process jobs:90, queued 3.20 ms",
    ]


def test_show_json_of_a_remote_parent_and_a_lost_process(remote_repo, capsys):
    doc = json.loads(run(capsys, "--db", remote_repo, "show", "e0e0", "--json")[1])

    root = doc["root"]
    (handle,) = root["children"]
    render, job = handle["children"]
    assert (doc["status"], root["name"], root["kind"]) == (
        "incomplete",
        "<remote parent>",
        "synthetic",
    )
    assert handle["handoff"] == {"kind": "remote", "queued_ns": None, "submitted_ns": None}
    assert [(n["status"], n["end_ns"]) for n in (handle, render)] == [("incomplete", None)] * 2
    assert (job["handoff"]["kind"], job["handoff"]["queued_ns"]) == ("process", 3_200_000)


def test_ls_names_the_remote_parent_as_show_does(remote_repo, capsys):
    (summary,) = json.loads(run(capsys, "--db", remote_repo, "ls", "--json")[1])
    assert (summary["root"], summary["status"], summary["duration_ns"]) == (
        "<remote parent>",
        "incomplete",  # its only open calls belong to a lost process
        None,
    )

    code, out, _ = run(capsys, "--db", remote_repo, "ls")
    assert code == 0
    columns = re.split(r"\s{2,}", out.splitlines()[1])
    assert columns[2:] == ["-", "incomplete", "3", "2", "2", "<remote parent>"]


def test_stats_show_each_process_state_and_heartbeat(remote_repo, capsys):
    code, out, _ = run(capsys, "--db", remote_repo, "stats")

    assert code == 0
    header, api, jobs = (re.split(r"\s{2,}", line) for line in out.splitlines()[-3:])
    assert header == ["PROCESS", "PUID", "DROPPED", "HEARTBEAT", "LAST SEEN", "STATE"]
    assert (api[0], api[3], api[5]) == ("api:80", "100 ms", "lost")
    assert (jobs[0], jobs[3], jobs[5]) == ("jobs:90", "-", "alive")  # it promised no heartbeat

    doc = json.loads(run(capsys, "--db", remote_repo, "stats", "--json")[1])
    states = {p["puid"]: (p["heartbeat_ms"], p["ended"], p["state"]) for p in doc["processes"]}
    assert states == {API: (100, False, "lost"), JOBS: (0, False, "alive")}


def test_show_critical_path_follows_what_the_caller_waited_for_last(handoff_repo, capsys):
    code, out, _ = run(capsys, "--db", handoff_repo, "show", "d0d0", "--critical-path")

    assert code == 0
    assert out.splitlines() == [
        "critical path: 3 calls, 20.0 ms end to end, 4.32 ms of it queued",
        f"{SEQ_D.hex()}  complete  20.0 ms  4 calls · 2 threads · 1 process · 1 hidden",
        "20.0 ms  shop.checkout  self 13.4 ms  thread-1 (1) testhost:4242",
        '├─ 4.80 ms  shop.fetch  self 4.80 ms  thread-2 (2)  → thread "thread-2", queued 3.20 ms',
        "├─ 880 µs  shop.audit  self 880 µs  thread-1 (1)  → task, queued 1.12 ms",
        "└─ … 1 call hidden",
    ]
    doc = json.loads(
        run(capsys, "--db", handoff_repo, "show", "d0", "--critical-path", "--json")[1]
    )
    assert doc["seq"] == SEQ_D.hex()
    assert [step["name"] for step in doc["path"]] == ["shop.checkout", "shop.fetch", "shop.audit"]


@pytest.mark.parametrize("other", [["--threads"], ["--depth", "1"], ["--min-duration", "1"]])
def test_show_critical_path_refuses_options_that_hide_calls(handoff_repo, capsys, other):
    code, _, err = run(capsys, "--db", handoff_repo, "show", "d0d0", "--critical-path", *other)

    assert code == 1
    assert one_line_error(err).startswith("cmr: --critical-path follows every call")


SEQ_E = bytes.fromhex("e0e0" + "00" * 14)  # a hand-off to untraced code that ran nothing
HID_SHUTDOWN = 0x7003


@pytest.fixture(name="empty_hop_repo")
def fixture_empty_hop_repo(tmp_path, make_batch) -> str:
    """shop.main runs shop.step, then hands asyncio's _do_shutdown (untraced) to a thread: the
    tracer times it as a call named by the hand-off's own method (9)."""
    names = {1: "shop.main", 2: "shop.step", 9: "asyncio.base_events.BaseEventLoop._do_shutdown"}
    events = {
        1: [
            wire.Start(1, 0, 0, 1, 0, SEQ_E),
            wire.Start(2, 1, 0, 2, 1 * MS, SEQ_E),
            wire.End(2, 5 * MS),
            wire.Handoff(HID_SHUTDOWN, 1, "thread", 9, 6 * MS, SEQ_E),
            wire.End(1, 10 * MS),
        ],
        2: [wire.Start(3, 1, HID_SHUTDOWN, 9, 7 * MS, SEQ_E), wire.End(3, 8 * MS)],
    }
    path = str(tmp_path / "hops.sqlite")
    store = open_store(path)
    try:
        store.ingest(make_batch(SHOP, 1, events, methods=names), 0)
    finally:
        store.close()
    return path


def test_a_hand_off_that_ran_nothing_traced_is_folded_into_its_caller_s_line(
    empty_hop_repo, capsys
):
    code, out, _ = run(capsys, "--db", empty_hop_repo, "show", "e0e0")

    assert code == 0
    assert out.splitlines() == [
        f"{SEQ_E.hex()}  complete  10.0 ms  3 calls · 2 threads · 1 process",
        "10.0 ms  shop.main  self 6.00 ms  thread-1 (1) testhost:4242  +1 untraced hand-off folded",
        "└─ 4.00 ms  shop.step  self 4.00 ms  thread-1 (1)",
    ]
    doc = json.loads(run(capsys, "--db", empty_hop_repo, "show", "e0e0", "--json")[1])
    assert doc["root"]["folded"] == 1
    assert [child["name"] for child in doc["root"]["children"]] == ["shop.step"]
    assert "folded" not in doc["root"]["children"][0]  # only where something was folded


def test_all_shows_the_folded_hand_offs_in_every_view(empty_hop_repo, capsys, tmp_path):
    shown = run(capsys, "--db", empty_hop_repo, "show", "e0e0", "--all")[1]
    assert "_do_shutdown" in shown
    assert "folded" not in shown
    for command in (["export", "e0e0", "--format", "chrome"], ["profile", "e0e0"]):
        folded = run(capsys, "--db", empty_hop_repo, *command)[1]
        everything = run(capsys, "--db", empty_hop_repo, *command, "--all")[1]
        assert "_do_shutdown" not in folded, command
        assert "_do_shutdown" in everything, command
    # A bundle moves the records as they are: imported elsewhere, --all still finds the call.
    bundle, other = str(tmp_path / "e0.ivsq"), str(tmp_path / "other.sqlite")
    assert (
        run(capsys, "--db", empty_hop_repo, "export", "e0e0", "--format", "bundle", "-o", bundle)[0]
        == 0
    )
    assert run(capsys, "--db", other, "import", bundle)[0] == 0
    assert "_do_shutdown" in run(capsys, "--db", other, "show", "e0e0", "--all")[1]

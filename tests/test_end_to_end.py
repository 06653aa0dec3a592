"""@traced → ZeroMQ → `cmr serve` → SQLite → `cmr show`, all real processes and sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import (
    cmr,
    cmr_json,
    cmr_server,
    interactive,
    read_line,
    run_traced,
    say,
    shape,
    wait_for,
    write_script,
)

pytestmark = pytest.mark.system

SHOP = """
import tracer

@tracer.traced
def handle_request(user):
    authenticate(user)
    cart = load_cart(user)
    try:
        charge(cart)
    except PaymentDeclined:
        pass
    return render(cart)

@tracer.traced
def authenticate(user):
    return user

@tracer.traced
def load_cart(user):
    return [fetch_item(i) for i in range(3)]

@tracer.traced
def fetch_item(i):
    return i * 10

class PaymentDeclined(Exception):
    pass

@tracer.traced
def charge(cart):
    validate(cart)

@tracer.traced
def validate(cart):
    raise PaymentDeclined("card expired")

@tracer.traced(name="render_receipt")
def render(cart):
    return sum(cart)

print(handle_request("ada"))
"""

EXPECTED = {
    "name": "__main__.handle_request",
    "status": "ok",
    "children": [
        {"name": "__main__.authenticate", "status": "ok"},
        {
            "name": "__main__.load_cart",
            "status": "ok",
            "children": [{"name": "__main__.fetch_item", "status": "ok"}] * 3,
        },
        {
            "name": "__main__.charge",
            "status": "error",
            "error": "PaymentDeclined",
            "children": [
                {"name": "__main__.validate", "status": "error", "error": "PaymentDeclined"}
            ],
        },
        {"name": "__main__.render_receipt", "status": "ok"},
    ],
}


def test_traced_program_tree_through_real_server(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "shop.py", SHOP)
    with cmr_server(db) as endpoint:
        result = run_traced(script, endpoint)
        assert result.stdout == "30\n"
    sequences = cmr_json(db, "ls")
    assert len(sequences) == 1
    summary = sequences[0]
    assert summary["root"] == "__main__.handle_request"
    assert summary["status"] == "complete"
    assert summary["invocations"] == 9
    assert (summary["threads"], summary["processes"]) == (1, 1)
    shown = cmr_json(db, "show", summary["seq"][:8])
    assert shown["seq"] == summary["seq"]
    assert shown["status"] == "complete"
    assert shape(shown["root"]) == EXPECTED
    root = shown["root"]
    assert root["kind"] == "measured"
    assert root["handoff"] is None
    assert root["thread"]["name"] == "MainThread"
    assert root["process"]["pid"] > 0
    assert root["duration_ns"] == root["end_ns"] - root["start_ns"]
    assert root["self_ns"] == root["duration_ns"] - sum(c["duration_ns"] for c in root["children"])
    text = cmr(db, "show", summary["seq"][:8]).stdout
    assert "handle_request" in text
    assert "PaymentDeclined" in text


RUNNING = """
import sys
import tracer

@tracer.traced
def slow_request():
    step()
    tracer.flush()
    print("in-flight", flush=True)
    sys.stdin.readline()
    step()

@tracer.traced
def step():
    return 1

slow_request()
"""


def test_sequence_is_visible_while_running_then_complete(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "running.py", RUNNING)
    with cmr_server(db) as endpoint, interactive(script, endpoint) as program:
        assert read_line(program, 60) == "in-flight\n"
        (summary,) = cmr_json(db, "ls")
        assert summary["status"] == "running"
        assert summary["duration_ns"] is None
        shown = cmr_json(db, "show", summary["seq"])
        assert shown["status"] == "running"
        assert shape(shown["root"]) == {
            "name": "__main__.slow_request",
            "status": "running",
            "children": [{"name": "__main__.step", "status": "ok"}],
        }
        assert shown["root"]["end_ns"] is None
        assert "running" in cmr(db, "show", summary["seq"]).stdout
        say(program, "go")
        assert program.wait(60) == 0
    shown = cmr_json(db, "show", summary["seq"])
    assert shown["status"] == "complete"
    assert [c["status"] for c in shown["root"]["children"]] == ["ok", "ok"]


def test_unknown_and_ambiguous_prefixes_are_one_line_errors(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(
        tmp_path / "many.py",
        SHOP.replace('print(handle_request("ada"))', "")
        + "\nfor user in range(40):\n    handle_request(user)\n",
    )
    with cmr_server(db) as endpoint:
        run_traced(script, endpoint)
    unknown = cmr(db, "show", "zz", check=False)
    assert unknown.returncode == 1
    assert len(unknown.stderr.strip().splitlines()) == 1
    seqs = [s["seq"] for s in cmr_json(db, "ls", "--limit", "100")]
    assert len(seqs) == 40
    first_digits = [s[0] for s in seqs]
    shared = max(set(first_digits), key=first_digits.count)  # 40 ids over 16 digits: some repeat
    ambiguous = cmr(db, "show", shared, check=False)
    assert ambiguous.returncode == 1
    assert len(ambiguous.stderr.strip().splitlines()) == 1
    assert "matches" in ambiguous.stderr


def test_bad_frames_are_counted_and_valid_traffic_continues(tmp_path: Path) -> None:
    import msgspec
    import zmq

    from invoseq import wire

    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "shop.py", SHOP)
    with cmr_server(db) as endpoint:
        context = zmq.Context()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(endpoint)
        good_body = msgspec.msgpack.encode(
            (7, 1, (1, "h", "p", 0, 0, []), [], [], [(1, [(1, 5, 0)])], 0, False)
        )
        sock.send_multipart([b"\x00garbage\xff", b"rubbish"])  # no magic
        sock.send_multipart([wire.header(1)[:4] + bytes((99, 1)), good_body])  # future version
        sock.send_multipart([wire.BATCH_HEADER, good_body[: len(good_body) // 2]])  # truncated
        sock.send_multipart([wire.BATCH_HEADER, msgspec.msgpack.encode({"a": [1, 2]})])  # shape
        sock.send_multipart([wire.BATCH_HEADER])  # one frame only
        sock.send_multipart([wire.BATCH_HEADER, good_body])  # valid: acknowledged
        assert sock.poll(30_000), "no acknowledgement for the valid batch"
        head, body = sock.recv_multipart()
        assert head == wire.ACK_HEADER
        assert msgspec.msgpack.decode(body) == [7, 1]
        sock.close()
        context.term()
        run_traced(script, endpoint)
    stats = cmr_json(db, "stats")
    assert stats["rejected"] == {"garbage": 1, "version": 1, "decode": 2, "frames": 1}
    assert stats["batches"] >= 2
    (summary,) = cmr_json(db, "ls")
    assert summary["root"] == "__main__.handle_request"
    assert summary["status"] == "complete"


FAN_OUT = """
from concurrent.futures import ThreadPoolExecutor
import tracer

@tracer.traced
def request():
    with ThreadPoolExecutor(2, thread_name_prefix="worker") as pool:
        futures = [pool.submit(load, 1), pool.submit(untraced, 2)]
        return [f.result() for f in futures]

@tracer.traced
def load(i):
    return i

def untraced(i):
    return load(i)

print(request())
"""


def test_thread_hand_offs_through_the_real_repository(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "fan_out.py", FAN_OUT)
    with cmr_server(db) as endpoint:
        result = run_traced(script, endpoint, INVOSEQ_INSTRUMENT="1")
        assert result.stdout == "[1, 2]\n"
    (summary,) = cmr_json(db, "ls")
    assert summary["invocations"] == 4
    assert summary["threads"] in (2, 3)  # the pool may reuse its first thread for the second task
    root = cmr_json(db, "show", summary["seq"])["root"]
    assert shape(root) == {
        "name": "__main__.request",
        "status": "ok",
        "children": [
            {"name": "__main__.load", "status": "ok"},
            {
                "name": "__main__.untraced",
                "status": "ok",
                "children": [{"name": "__main__.load", "status": "ok"}],
            },
        ],
    }
    hops = root["children"]
    assert [h["handoff"]["kind"] for h in hops] == ["thread", "thread"]
    assert all(h["thread"]["name"].startswith("worker") for h in hops)
    for hop in hops:
        assert hop["handoff"]["queued_ns"] == hop["start_ns"] - hop["handoff"]["submitted_ns"]
        assert root["start_ns"] <= hop["handoff"]["submitted_ns"] <= hop["start_ns"]
    assert hops[1]["children"][0]["handoff"] is None  # within the worker's thread
    text = cmr(db, "show", summary["seq"]).stdout
    assert '→ thread "worker' in text
    assert "queued" in text
    threads = cmr_json(db, "show", summary["seq"], "--threads")
    assert (threads[0]["thread"]["name"], threads[0]["invocations"]) == ("MainThread", 1)
    assert sum(t["invocations"] for t in threads[1:]) == 3
    assert all(t["thread"]["name"].startswith("worker") for t in threads[1:])
    assert threads[0]["busy_ns"] == root["duration_ns"]


RECONFIGURED = """
import sys
import tracer

@tracer.traced
def before():
    return 1

@tracer.traced
def after():
    return 2

before()
tracer.flush(30)
tracer.configure(endpoint=sys.argv[1])  # a new sender, same process: nothing may be discarded
tracer.configure(endpoint=sys.argv[1], flush_interval_ms=20)
after()
tracer.flush(30)
print("flushed", flush=True)
sys.stdin.readline()
"""


def test_reconfiguring_loses_nothing_and_does_not_end_the_process(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "reconfigured.py", RECONFIGURED)
    # No resend for a slow acknowledgement (a loaded machine): a duplicate here could only come
    # from the replaced sender's batches being sent twice.
    slow_ack = {"INVOSEQ_RESEND_MS": "120000"}
    with cmr_server(db) as endpoint, interactive(script, endpoint, endpoint, **slow_ack) as program:
        assert read_line(program, 60) == "flushed\n"
        stats = cmr_json(db, "stats")
        assert stats["duplicate_batches"] == 0
        [process] = stats["processes"]
        assert process["state"] == "alive"  # replacing the sender is not the end
        say(program, "")
        assert program.wait(60) == 0
    assert sorted(s["root"] for s in cmr_json(db, "ls")) == ["__main__.after", "__main__.before"]
    [process] = cmr_json(db, "stats")["processes"]
    assert process["state"] == "ended"


DETACHED = """
import sys
import threading

import tracer

release = threading.Event()


@tracer.traced
def write(line):
    return len(line)


def writer():  # untraced (tracer run traces __main__): its thread runner times it
    release.wait(120)
    write("later")


@tracer.traced
def handle_request():
    thread = threading.Thread(target=writer, name="writer", daemon=True)
    thread.start()
    write("now")
    return thread


thread = handle_request()
tracer.flush()
print("handled", flush=True)
sys.stdin.readline()
release.set()
thread.join(60)
tracer.flush()
print("written", flush=True)
sys.stdin.readline()
"""


def test_a_request_that_starts_a_thread_it_does_not_wait_for_completes(tmp_path: Path) -> None:
    """Issue 34, point 3: the request completes when its own call ends; the thread shows as
    detached under it, running, and its later calls join the same sequence."""
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "detached.py", DETACHED)
    run = ("-m", "tracer", "run")
    with cmr_server(db) as endpoint, interactive(script, endpoint, launcher=run) as program:
        assert read_line(program, 60) == "handled\n"
        (summary,) = cmr_json(db, "ls")
        assert (summary["root"], summary["status"]) == ("__main__.handle_request", "complete")
        assert summary["duration_ns"] is not None
        assert [s["seq"] for s in cmr_json(db, "ls", "--status", "complete")] == [summary["seq"]]
        assert cmr_json(db, "ls", "--status", "running") == []

        def writer_started() -> dict | None:  # its thread's batch may come a little later
            shown = cmr_json(db, "show", summary["seq"])
            return shown if len(shown["root"]["children"]) == 2 else None

        shown = wait_for(writer_started, 60)
        assert shown["status"] == "complete"
        # in start order: the new thread's runner and the request's own call race to begin
        by_name = {child["name"]: child for child in shown["root"]["children"]}
        thread, direct = by_name["__main__.writer"], by_name["__main__.write"]
        assert (thread["name"], thread["status"], thread["detached"]) == (
            "__main__.writer",
            "running",
            True,
        )
        assert thread["handoff"]["kind"] == "thread"
        assert (direct["name"], "detached" in direct) == ("__main__.write", False)
        text = cmr(db, "show", summary["seq"]).stdout
        assert "detached" in next(line for line in text.splitlines() if "writer" in line)

        say(program, "go")  # the thread writes again, long after the request ended
        assert read_line(program, 60) == "written\n"
        (after,) = cmr_json(db, "ls")
        assert (after["seq"], after["status"], after["invocations"]) == (
            summary["seq"],
            "complete",
            4,
        )
        shown = cmr_json(db, "show", summary["seq"])
        [thread] = [c for c in shown["root"]["children"] if c["name"] == "__main__.writer"]
        assert shape(thread) == {
            "name": "__main__.writer",
            "status": "ok",
            "children": [{"name": "__main__.write", "status": "ok"}],
        }
        assert thread["detached"] is True  # it ended after the request did
        say(program, "")
        assert program.wait(60) == 0

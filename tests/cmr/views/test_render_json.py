"""The JSON documents are a published contract (docs/protocol.md): exact keys, order and types."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator

import pytest

from cmr.views.render.json import (
    thread_activity_to_json,
    tree_to_json,
)
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from cmr.views.tree.processors import limit_depth, thread_activity

NODE_KEYS = [
    "name",
    "start_ns",
    "end_ns",
    "duration_ns",
    "self_ns",
    "process",
    "thread",
    "status",
    "error",
    "kind",
    "handoff",
    "samples",
    "frame",
    "bounds",
    "attributes",
    "children",
]


def check_node(node: dict) -> None:
    optional = ["detached"] if "detached" in node else []
    assert list(node) == NODE_KEYS[:-1] + optional + NODE_KEYS[-1:]  # children come last
    assert node.get("detached", True) is True  # only on a call that outlived its caller
    assert isinstance(node["name"], str)
    assert isinstance(node["start_ns"], int)
    for key in ("end_ns", "duration_ns", "self_ns"):
        assert node[key] is None or isinstance(node[key], int)
    assert list(node["process"]) == ["host", "pid", "puid"]
    assert isinstance(node["process"]["host"], str)
    assert isinstance(node["process"]["pid"], int)
    assert isinstance(node["process"]["puid"], int)
    assert list(node["thread"]) == ["tid", "name"]
    assert isinstance(node["thread"]["tid"], int)
    assert isinstance(node["thread"]["name"], str)
    assert node["status"] in {"ok", "error", "running", "incomplete"}
    assert node["error"] is None or isinstance(node["error"], str)
    assert node["kind"] in {"measured", "synthetic", "estimated"}
    samples = node["samples"]
    if samples is not None:
        assert list(samples) == ["total", "self", "cpu_ns"]
        assert isinstance(samples["total"], int)
        assert isinstance(samples["self"], int)
        assert samples["cpu_ns"] is None or isinstance(samples["cpu_ns"], int)
    frame = node["frame"]
    if frame is not None:
        assert list(frame) == ["file", "function", "line"]
        assert isinstance(frame["line"], int)
    bounds = node["bounds"]
    assert (bounds is not None) == (node["kind"] == "estimated")
    if bounds is not None:
        assert list(bounds) == ["start_min_ns", "start_max_ns", "end_min_ns", "end_max_ns"]
        assert bounds["start_min_ns"] <= bounds["start_max_ns"]
        assert bounds["start_min_ns"] <= bounds["end_min_ns"]
        assert bounds["end_max_ns"] is None or bounds["end_min_ns"] <= bounds["end_max_ns"]
    attributes = node["attributes"]
    assert attributes is None or all(
        isinstance(key, str) and isinstance(value, str | int | float | bool)
        for key, value in attributes.items()
    )
    handoff = node["handoff"]
    if handoff is not None:
        assert list(handoff) == ["kind", "queued_ns", "submitted_ns"]
        assert isinstance(handoff["kind"], str)
        if handoff["kind"] == "remote" and handoff["submitted_ns"] is None:
            assert handoff["queued_ns"] is None  # a remote parent never recorded here
        else:
            assert isinstance(handoff["queued_ns"], int)
            assert isinstance(handoff["submitted_ns"], int)
    assert isinstance(node["children"], list)


def test_show_document_has_exactly_the_contract_keys_and_types(builder):
    builder.thread(1, "MainThread")
    builder.call("shop.checkout", 1, start=100, end=1_100)
    builder.call("shop.pay", 2, 1, start=200, end=700, error="ValueError")
    builder.call("shop.log", 3, 1, start=800)
    builder.call("shop.remote", 1, start=900, puid=2**63 - 1, hid=4)

    doc = json.loads(tree_to_json(build_tree(builder.data())))

    assert list(doc) == ["seq", "status", "lossy", "dropped_by", "root"]
    assert doc["seq"] == "0123456789abcdef0123456789abcdef"
    # The root ended: the sequence is complete; shop.log, still running, is detached.
    assert (doc["status"], doc["lossy"], doc["dropped_by"]) == ("complete", False, [])
    root = doc["root"]
    check_node(root)
    for child in root["children"]:
        check_node(child)
    assert root == {
        "name": "shop.checkout",
        "start_ns": 100,
        "end_ns": 1_100,
        "duration_ns": 1_000,
        "self_ns": 200,  # children cover 200..700 and 800..1100 (open ones count to the end)
        "process": {"host": "box", "pid": 4242, "puid": 0x1111},
        "thread": {"tid": 1, "name": "MainThread"},
        "status": "ok",
        "error": None,
        "kind": "measured",
        "handoff": None,
        "samples": None,  # none were merged in
        "frame": None,
        "bounds": None,
        "attributes": None,  # none were recorded (wire.Attrs: OpenTelemetry spans)
        "children": root["children"],
    }
    pay, log, remote = root["children"]
    assert (pay["status"], pay["error"], pay["duration_ns"], pay["children"]) == (
        "error",
        "ValueError",
        500,
        [],
    )
    assert (log["status"], log["end_ns"], log["duration_ns"], log["self_ns"]) == (
        "running",
        None,
        None,
        None,
    )
    assert (log["detached"], "detached" in pay, "detached" in remote) == (True, False, False)
    assert remote["process"]["puid"] == 2**63 - 1  # an integer, never hex


def test_a_hand_off_is_kind_queue_time_and_submit_time_and_null_within_a_thread(builder):
    builder.call("shop.checkout", 1, start=100, end=10_000)
    builder.handoff(2**63 - 1, 1, submitted=1_000, kind="thread")
    builder.call("shop.fetch", 2, 1, start=4_200, end=5_000, tid=2, hid=2**63 - 1)
    builder.call("shop.parse", 3, 2, start=4_300, end=4_400, tid=2)

    root = json.loads(tree_to_json(build_tree(builder.data())))["root"]

    (fetch,) = root["children"]
    (parse,) = fetch["children"]
    for node in (root, fetch, parse):
        check_node(node)
    assert fetch["handoff"] == {"kind": "thread", "queued_ns": 3_200, "submitted_ns": 1_000}
    assert fetch["thread"] == {"tid": 2, "name": "T2"}
    assert root["handoff"] is None
    assert parse["handoff"] is None


def test_threads_document_lists_each_thread_once_in_order_of_first_activity(builder):
    builder.thread(1, "MainThread")
    builder.thread(2, "pool-0")
    builder.process(pid=4242, host="box")
    builder.call("shop.checkout", 1, start=100, end=1_100)
    builder.handoff(5, 1, submitted=150)
    builder.call("shop.fetch", 2, 1, start=200, end=500, tid=2, hid=5)
    builder.call("shop.parse", 3, 2, start=300, end=400, tid=2)

    doc = json.loads(thread_activity_to_json(thread_activity(build_tree(builder.data()))))

    assert doc == [
        {
            "process": {"host": "box", "pid": 4242, "puid": 0x1111},
            "thread": {"tid": 1, "name": "MainThread"},
            "invocations": 1,
            "busy_ns": 1_000,
            "first_start_ns": 100,
        },
        {
            "process": {"host": "box", "pid": 4242, "puid": 0x1111},
            "thread": {"tid": 2, "name": "pool-0"},
            "invocations": 2,
            "busy_ns": 300,
            "first_start_ns": 200,
        },
    ]
    assert [list(entry) for entry in doc] == [
        ["process", "thread", "invocations", "busy_ns", "first_start_ns"]
    ] * 2


def test_views_apply_to_json_too(builder):
    builder.call("m.root", 1, start=0, end=10)
    builder.call("m.child", 2, 1, start=1, end=2)

    doc = json.loads(tree_to_json(limit_depth(build_tree(builder.data()), 0)))

    assert doc["root"]["children"] == []


def test_a_synthetic_root_is_marked_as_such(builder):
    builder.call("m.orphan", 2, 1, start=1, end=2)

    root = json.loads(tree_to_json(build_tree(builder.data())))["root"]

    check_node(root)
    assert (root["name"], root["kind"], root["status"]) == (
        "<unknown root>",
        "synthetic",
        "incomplete",
    )


def test_a_remote_parent_is_synthetic_and_its_calls_carry_a_remote_hop_without_times(builder):
    builder.call("api.handle", 1, start=100, end=500, hid=0xF0F0)

    root = json.loads(tree_to_json(build_tree(builder.data())))["root"]

    check_node(root)
    (handle,) = root["children"]
    check_node(handle)
    assert (root["name"], root["kind"], root["status"], root["handoff"]) == (
        "<remote parent>",
        "synthetic",
        "ok",
        None,
    )
    assert handle["handoff"] == {"kind": "remote", "queued_ns": None, "submitted_ns": None}


def test_a_call_of_a_lost_process_keeps_the_incomplete_node_contract(builder):
    builder.process(lost=True, last_seen_ns=5_000)
    builder.call("shop.checkout", 1, start=100)

    doc = json.loads(tree_to_json(build_tree(builder.data())))

    check_node(doc["root"])
    assert (doc["status"], doc["root"]["status"], doc["root"]["end_ns"]) == (
        "incomplete",
        "incomplete",
        None,
    )


def frames_below_here() -> int:
    """How many frames the interpreter's stack holds at the caller."""
    frame, depth = sys._getframe(1), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


@pytest.fixture(name="recursion_limit")
def fixture_recursion_limit() -> Iterator[Callable[[int], None]]:
    """Sets the interpreter's recursion limit for the test; the old one comes back after."""
    old = sys.getrecursionlimit()
    yield sys.setrecursionlimit
    sys.setrecursionlimit(old)


def test_a_chain_deeper_than_the_recursion_limit_is_written_without_recursion(
    builder, recursion_limit
):
    # The writer gets 100 frames above this one: a writer that recursed per level would need
    # DEPTH. The reader, json.loads, does recurse: DEPTH stays within what every supported
    # Python's json reads (3.12 caps its C recursion near 1,500 nested containers, 3.13 near
    # 10,000, whatever the recursion limit; a node is two, an object and its children list).
    depth = 600
    for iid in range(1, depth + 1):
        builder.call("m.f", iid, iid - 1, start=iid, end=3 * depth - iid)
    tree = build_tree(builder.data())
    recursion_limit(frames_below_here() + 100)
    text = tree_to_json(tree)
    recursion_limit(10_000)  # Python 3.11's json obeys the limit: room to read it back

    node = json.loads(text)["root"]
    seen = 1
    while node["children"]:
        (node,) = node["children"]
        seen += 1
    assert seen == depth
    check_node(node)


def test_merged_samples_add_estimated_nodes_and_a_samples_key_on_every_node(builder):
    builder.call("shop.checkout", 1, start=0, end=100, line=10)
    builder.call("shop.pay", 2, 1, start=50, end=60, line=20)
    builder.frame(1, "checkout", line=10)
    builder.frame(2, "parse", line=30, file="/srv/shop/io.py")
    builder.sample(10, [1, 2], duration=10, cpu=4)
    data = builder.data()

    root = json.loads(tree_to_json(merge_samples(build_tree(data), data)))["root"]

    parse, pay = root["children"]
    for node in (root, parse, pay):
        check_node(node)
    assert root["samples"] == {"total": 1, "self": 0, "cpu_ns": 4}
    assert pay["samples"] is None  # no sample fell in it
    assert {key: parse[key] for key in ("name", "kind", "duration_ns", "self_ns", "status")} == {
        "name": "parse",
        "kind": "estimated",
        "duration_ns": 10,
        "self_ns": 10,
        "status": "ok",
    }
    assert parse["samples"] == {"total": 1, "self": 1, "cpu_ns": 4}
    assert parse["frame"] == {"file": "/srv/shop/io.py", "function": "parse", "line": 30}
    assert (parse["start_ns"], parse["end_ns"], parse["handoff"]) == (10, 20, None)

"""Profiles: merged trees folded into one stack tree, across calls, sequences and threads."""

from __future__ import annotations

import json
import re

from cmr.views.analyses.profile import (
    Profile,
    ProfileNode,
    ThreadOrigin,
    build_profile,
    method_subtrees,
    profile_sequence,
)
from cmr.views.model import KIND_MEASURED
from cmr.views.render.json import profile_to_json
from cmr.views.render.profile_text import render_profile
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import SequenceBuilder


def outline(profile: Profile) -> list[str]:
    lines = []
    stack: list[tuple[ProfileNode, int]] = [(root, 0) for root in reversed(profile.roots)]
    while stack:
        node, depth = stack.pop()
        lines.append(
            f"{'  ' * depth}{node.name} calls={node.calls} t={node.time_ns}/{node.self_ns} "
            f"n={node.samples}/{node.self_samples} cpu={node.cpu_ns}"
        )
        stack.extend((child, depth + 1) for child in reversed(node.children))
    return lines


def checkout(builder: SequenceBuilder) -> None:
    """checkout calls price three times; two of them were sampled in lookup."""
    builder.call("shop.checkout", 1, start=0, end=100, line=10)
    for iid, begin in ((2, 10), (3, 30), (4, 50)):
        builder.call("shop.price", iid, 1, start=begin, end=begin + 10, line=20)
    builder.frame(1, "checkout", line=10)
    builder.frame(2, "price", line=20)
    builder.frame(3, "lookup", line=30, file="/srv/shop/db.py")
    builder.sample(12, [1, 2, 3], duration=5, cpu=5)
    builder.sample(32, [1, 2, 3], duration=5)
    builder.sample(52, [1, 2], duration=5)
    builder.sample(70, [1], duration=10, cpu=10)


def test_repeated_calls_of_a_sequence_merge_into_one_line(builder):
    checkout(builder)
    data = builder.data()

    profile = profile_sequence(merge_samples(build_tree(data), data))

    assert outline(profile) == [
        "shop.checkout calls=1 t=100/70 n=4/1 cpu=15",
        "  shop.price calls=3 t=30/20 n=3/1 cpu=5",
        "    lookup calls=2 t=10/10 n=2/2 cpu=5",
    ]
    assert (profile.sequences, profile.samples_skipped, profile.by_thread) == (1, 0, False)
    lookup = profile.roots[0].children[0].children[0]
    assert (lookup.kind, lookup.frame) == ("estimated", ("/srv/shop/db.py", "lookup", 30))
    assert (lookup.off_cpu_ns, profile.roots[0].off_cpu_ns) == (5, 85)


def handle_sequences() -> list[tuple[SequenceBuilder, str]]:
    """Two sequences calling app.handle: below main (with a nested handle), and as the root."""
    nested = SequenceBuilder()
    nested.call("app.main", 1, start=0, end=100, line=1)
    nested.call("app.handle", 2, 1, start=10, end=60, line=20)
    nested.call("app.handle", 3, 2, start=20, end=30, line=20)
    nested.frame(1, "main", line=1)
    nested.frame(2, "handle", line=20)
    nested.frame(3, "work", line=40)
    nested.sample(40, [1, 2, 3], duration=10, cpu=10)
    rooted = SequenceBuilder()
    rooted.call("app.handle", 1, start=0, end=50, line=20)
    rooted.frame(2, "handle", line=20)
    rooted.frame(3, "work", line=40)
    rooted.sample(5, [2, 3], duration=10)
    rooted.sample(20, [2], duration=10)
    return [(nested, "nested"), (rooted, "rooted")]


def test_a_method_is_profiled_from_each_outermost_call_across_sequences():
    subtrees = []
    for sequence, _ in handle_sequences():
        data = sequence.data()
        tree = merge_samples(build_tree(data), data)
        subtrees += method_subtrees(tree, data, "app.handle")
    assert [node.start_ns for node in subtrees] == [10, 0]  # the nested call is inside the first

    profile = build_profile(subtrees, sequences=2, skipped=0)

    assert outline(profile) == [
        "app.handle calls=2 t=100/70 n=3/1 cpu=10",
        "  work calls=2 t=20/20 n=2/2 cpu=10",
        "  app.handle calls=1 t=10/10 n=0/0 cpu=None",
    ]


def test_a_method_is_found_by_its_bare_qualname_too():
    (sequence, _), _ = handle_sequences()
    data = sequence.data()
    tree = build_tree(data)

    assert method_subtrees(tree, data, "handle") == method_subtrees(tree, data, "app.handle")
    assert method_subtrees(tree, data, "app.hand") == []


def pool(builder: SequenceBuilder) -> None:
    """main hands work to a pool thread and waits for it."""
    builder.thread(1, "MainThread")
    builder.thread(2, "pool-0")
    builder.call("app.main", 1, start=0, end=100, line=10, tid=1)
    builder.handoff(77, 1, submitted=5)
    builder.call("app.work", 2, 1, start=10, end=90, line=40, tid=2, hid=77)
    builder.frame(1, "main", line=10)
    builder.frame(2, "wait", line=400)
    builder.frame(3, "work", line=40)
    builder.frame(4, "crunch", line=60)
    builder.frame(9, "_worker", line=70)
    builder.sample(0, [1, 2], tid=1, duration=10)
    builder.sample(90, [1, 2], tid=1, duration=10)
    builder.sample(20, [9, 3, 4], tid=2, duration=20, cpu=20)


def test_by_thread_gives_each_thread_a_root_summing_what_ran_there(builder):
    pool(builder)
    data = builder.data()
    tree = merge_samples(build_tree(data), data)

    assert outline(profile_sequence(tree)) == [
        "app.main calls=1 t=100/0 n=3/0 cpu=20",
        "  app.work calls=1 t=80/60 n=1/0 cpu=20",
        "    crunch calls=1 t=20/20 n=1/1 cpu=20",
        "  wait calls=1 t=20/20 n=2/2 cpu=0",
    ]
    profile = profile_sequence(tree, by_thread=True)
    assert outline(profile) == [
        "MainThread (1) box:4242 calls=1 t=100/0 n=2/0 cpu=0",
        "  app.main calls=1 t=100/0 n=2/0 cpu=0",
        "    wait calls=1 t=20/20 n=2/2 cpu=0",
        "pool-0 (2) box:4242 calls=1 t=80/0 n=1/0 cpu=20",
        "  app.work calls=1 t=80/60 n=1/0 cpu=20",
        "    crunch calls=1 t=20/20 n=1/1 cpu=20",
    ]
    assert [root.thread for root in profile.roots] == [
        ThreadOrigin("box", 4242, 0x1111, 1, "MainThread"),
        ThreadOrigin("box", 4242, 0x1111, 2, "pool-0"),
    ]


def test_a_running_call_counts_the_time_its_children_account_for(builder):
    builder.call("app.serve", 1, start=0, line=10)
    builder.call("app.accept", 2, 1, start=10, end=40, line=20)
    data = builder.data()

    (root,) = profile_sequence(build_tree(data)).roots

    assert (root.time_ns, root.self_ns, root.cpu_ns) == (30, 0, None)


def test_profile_text_reads_like_pyinstrument(builder):
    checkout(builder)
    data = builder.data()
    profile = profile_sequence(merge_samples(build_tree(data), data))

    assert render_profile(profile, "profile of sequence 0123").splitlines() == [
        "profile of sequence 0123",
        "1 sequence · 4 samples",
        "100 ns  shop.checkout  self 70 ns  on-CPU 15 ns  off-CPU 85 ns  4 samples (1 self)",
        "└─ 30 ns  shop.price  3 calls  self 20 ns  on-CPU 5 ns  off-CPU 25 ns  3 samples (1 self)",
        "   └─ ~10 ns  lookup  shop/db.py:30  2 calls  self 10 ns  on-CPU 5 ns  off-CPU 5 ns  "
        "2 samples (2 self)",
    ]
    coloured = render_profile(profile, "t", color=True)
    assert "\033[2m~10 ns  lookup" in coloured  # estimated frames are dim


def test_profile_json_has_the_contract_keys(builder):
    pool(builder)
    data = builder.data()
    profile = profile_sequence(merge_samples(build_tree(data), data), by_thread=True)

    doc = json.loads(profile_to_json(profile, seq=data.seq))

    assert list(doc) == [
        "seq",
        "method",
        "since_ns",
        "sequences",
        "samples_skipped",
        "by_thread",
        "lines",
        "roots",
    ]
    assert (doc["seq"], doc["method"], doc["sequences"], doc["by_thread"]) == (
        data.seq.hex(),
        None,
        1,
        True,
    )
    main_thread = doc["roots"][0]
    assert main_thread == {
        "name": "MainThread (1) box:4242",
        "kind": "thread",
        "frame": None,
        "thread": {"host": "box", "pid": 4242, "puid": 0x1111, "tid": 1, "name": "MainThread"},
        "calls": 1,
        "samples": 2,
        "self_samples": 0,
        "time_ns": 100,
        "self_ns": 0,
        "cpu_ns": 0,
        "off_cpu_ns": 100,
        "children": main_thread["children"],
    }
    (main,) = main_thread["children"]
    (wait,) = main["children"]
    assert (main["kind"], main["frame"], main["thread"]) == ("measured", None, None)
    assert wait["frame"] == {"file": "app.py", "function": "wait", "line": 400}
    assert wait["children"] == []


def wide_profile(callers: int, callees: int) -> Profile:
    """One root over ``callers`` lines, each over ``callees`` lines: times fall with position."""
    callers_nodes = [
        ProfileNode(
            f"app.caller{c}",
            KIND_MEASURED,
            time_ns=1_000_000 - c * 1_000,
            children=[
                ProfileNode(f"app.callee{c}_{e}", KIND_MEASURED, time_ns=500 - e)
                for e in range(callees)
            ],
        )
        for c in range(callers)
    ]
    root = ProfileNode("app.main", KIND_MEASURED, time_ns=2_000_000, children=callers_nodes)
    return Profile([root], sequences=1, samples_skipped=0)


def test_a_big_profile_prints_its_longest_lines_within_the_budget_and_counts_the_rest():
    profile = wide_profile(callers=30, callees=20)  # 1 + 30 + 600 lines
    profile.roots[0].children[0].children[0].time_ns = 999_500  # longer than caller 1
    text = render_profile(profile, "t", max_nodes=40).splitlines()
    tree, closing = text[2:-1], text[-1]

    assert len(tree) <= 40
    shown = [line for line in tree if "app." in line]
    assert "app.caller0" in shown[1]  # the longest line first,
    assert "app.callee0_0" in shown[2]  # then the next longest (under its caller),
    assert "app.caller1" in shown[3]  # longer than any other callee
    folds = [line for line in tree if "… " in line]
    assert folds
    assert all(re.search(r"… [\d,]+ more, total ", line) for line in folds)
    counts = [
        re.search(r"… ([\d,]+) more, total [^,]+(?:, ([\d,]+) more beneath)?", f) for f in folds
    ]
    hidden = sum(
        int(m[1].replace(",", "")) + int((m[2] or "0").replace(",", "")) for m in counts if m
    )
    assert closing == (
        f"… {hidden:,} of 631 lines hidden to keep within 40 (longest first): "
        "--max-nodes 0 shows them all, --json writes every one"
    )
    assert len(shown) + hidden == 631


def test_a_profile_that_fits_or_has_no_limit_prints_every_line():
    profile = wide_profile(callers=3, callees=2)  # 10 lines
    for budget in (0, 10):
        text = render_profile(profile, "t", max_nodes=budget).splitlines()
        assert len(text) == 2 + 10
        assert not [line for line in text if "…" in line]
    assert len(render_profile(wide_profile(30, 20), "t", max_nodes=0).splitlines()) == 2 + 631

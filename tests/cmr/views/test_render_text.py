"""The terminal rendering: what a reader sees for each kind of call, and that big trees render."""

from __future__ import annotations

import datetime
import re

import pytest

from cmr.views.render.terms import format_duration
from cmr.views.render.text import GUIDE_BLOCK, render_text
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from cmr.views.tree.processors import drop_shorter_than, limit_depth

MS = 1_000_000


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0 ns"),
        (7, "7 ns"),
        (999, "999 ns"),
        (1_000, "1.00 µs"),
        (1_234, "1.23 µs"),
        (12_345, "12.3 µs"),
        (123_456, "123 µs"),
        (999_499, "999 µs"),
        (999_600, "1.00 ms"),  # rounds up into the next unit rather than showing "1000 µs"
        (99_960_000, "100 ms"),
        (1_500_000_000, "1.50 s"),
        (61_000_000_000, "61.0 s"),
        (12_345_000_000_000, "12345 s"),
    ],
)
def test_durations_read_in_three_significant_digits(ns, text):
    assert format_duration(ns) == text


@pytest.fixture(name="shop")
def fixture_shop(builder):
    builder.thread(1, "MainThread")
    builder.thread(2, "pool-0")
    builder.process(pid=4242, host="box")
    builder.process(0x2, pid=77, host="worker", ended=True)
    builder.call("shop.checkout", 1, start=0, end=1_000 * MS)
    builder.call("shop.price", 2, 1, start=10, end=10 + 400 * MS)
    builder.call("shop.tax", 3, 2, start=20, end=20 + 5 * MS, error="ValueError", tid=2)
    builder.call("shop.pay", 4, 1, start=900 * MS)
    builder.call("shop.remote", 9, 8, start=950 * MS, puid=0x2)
    return build_tree(builder.data())


def test_the_tree_is_drawn_with_guides_and_one_line_per_call(shop):
    lines = render_text(shop).splitlines()

    assert lines[0] == (
        "0123456789abcdef0123456789abcdef  complete  1.00 s  5 calls · 3 threads · 2 processes"
    )  # the root ended: shop.pay, still running, outlived it (detached)
    # Two processes: every line says which one it ran in.
    assert lines[1:] == [
        "1.00 s  shop.checkout  self 500 ms  MainThread (1) box:4242",
        "├─ 400 ms  shop.price  self 395 ms  MainThread (1) box:4242",
        "│  └─ 5.00 ms  shop.tax  self 5.00 ms  pool-0 (2) box:4242  ✗ ValueError",
        "├─ running  shop.pay  MainThread (1) box:4242  detached",
        "└─ incomplete (process ended)  shop.remote  T1 (1) worker:77",
    ]


def test_a_single_process_sequence_names_its_process_on_the_root_only(builder):
    builder.process(pid=4242, host="box")
    builder.call("shop.checkout", 1, start=0, end=1_000)
    builder.call("shop.price", 2, 1, start=10, end=500)

    assert render_text(build_tree(builder.data())).splitlines()[1:] == [
        "1.00 µs  shop.checkout  self 510 ns  T1 (1) box:4242",
        "└─ 490 ns  shop.price  self 490 ns  T1 (1)",
    ]


def test_an_incomplete_call_says_its_process_was_lost_and_when_it_was_last_seen(builder):
    noon = int(datetime.datetime(2025, 1, 2, 12, 0, 1).timestamp()) * 1_000_000_000
    last_seen = noon + 234_999_999  # shown to the millisecond, never rounded up
    builder.process(pid=4242, host="box", lost=True, last_seen_ns=last_seen)
    builder.call("shop.checkout", 1, start=0)
    builder.call("shop.price", 2, 1, start=10, end=500)
    tree = build_tree(builder.data())

    assert render_text(tree).splitlines() == [
        "0123456789abcdef0123456789abcdef  incomplete  2 calls · 1 thread · 1 process",
        "incomplete (process lost, last seen 12:00:01.234)  shop.checkout  T1 (1) box:4242",
        "└─ 490 ns  shop.price  self 490 ns  T1 (1)",
    ]
    coloured = render_text(tree, color=True).splitlines()[1]
    assert coloured.startswith("\033[35mincomplete\033[0m \033[2m(process lost, last seen")


def test_hidden_calls_are_announced_where_they_were_cut(shop):
    text = render_text(limit_depth(drop_shorter_than(shop, 100 * MS), 1))

    assert text.splitlines()[0].endswith("· 1 hidden")
    assert text.splitlines()[1:] == [
        "1.00 s  shop.checkout  self 500 ms  MainThread (1) box:4242",
        "├─ 400 ms  shop.price  self 395 ms  MainThread (1) box:4242",
        "│  └─ … 1 call hidden",
        "├─ running  shop.pay  MainThread (1) box:4242  detached",
        "└─ incomplete (process ended)  shop.remote  T1 (1) worker:77",
    ]
    assert render_text(limit_depth(shop, 0)).splitlines()[-1] == "└─ … 4 calls hidden"


def test_colour_only_when_asked(shop):
    plain = render_text(shop)
    coloured = render_text(shop, color=True)

    assert "\033[" not in plain
    assert "\033[31m✗ ValueError\033[0m" in coloured
    assert "\033[33mrunning\033[0m" in coloured
    # Stripping the escapes gives the plain text back: colour never changes the content.
    assert re.sub(r"\033\[\d+m", "", coloured) == plain


def test_a_complete_sequence_says_so_in_the_header(builder):
    builder.call("m.main", 1, start=0, end=2_000)

    assert render_text(build_tree(builder.data())).splitlines()[0].split("  ")[1:3] == [
        "complete",
        "2.00 µs",
    ]


def test_deep_and_wide_trees_render_completely(builder):
    depth = 10_000
    for iid in range(1, depth + 1):
        builder.call("m.deep", iid, iid - 1, start=iid, end=3 * depth - iid)
    for iid in range(depth + 1, 10 * depth):
        builder.call("m.wide", iid, depth // 2, start=iid, end=iid + 1)

    lines = render_text(build_tree(builder.data())).splitlines()

    assert len(lines) == 1 + 10 * depth - 1
    deepest = next(line for line in lines if line.endswith("m.deep  self 10.0 µs  T1 (1)"))
    # Guides restart every GUIDE_BLOCK levels, marked with the depth they continue from.
    assert deepest.startswith(f"[+{(depth - 2) // GUIDE_BLOCK * GUIDE_BLOCK}] ")
    assert max(len(line) for line in lines) < 3 * GUIDE_BLOCK + 80


def test_a_sequence_without_root_or_duration_reads_cleanly(builder):
    builder.process(pid=7, host="box")
    builder.call("m.lost_parent", 5, 4, start=100)

    assert render_text(build_tree(builder.data())).splitlines() == [
        "0123456789abcdef0123456789abcdef  running  1 call · 1 thread · 1 process",
        "running  <unknown root>",
        "└─ running  m.lost_parent  T1 (1) box:7",
    ]


def test_each_hand_off_shows_its_hop_and_queue_time(builder):
    builder.thread(1, "MainThread")
    builder.thread(2, "ThreadPoolExecutor-0_1")
    builder.process(pid=4242, host="box")
    builder.process(0x2, pid=77, host="worker")
    builder.process(0x3, pid=88, host="api")
    builder.call("shop.checkout", 1, start=0, end=100 * MS)
    builder.handoff(1, 1, submitted=1 * MS, kind="thread")
    builder.call("shop.fetch", 2, 1, start=4_200_000, end=10 * MS, tid=2, hid=1)
    builder.call("shop.parse", 3, 2, start=5 * MS, end=6 * MS, tid=2)
    builder.handoff(2, 1, submitted=20 * MS, kind="task")
    builder.call("shop.notify", 4, 1, start=20 * MS + 120_000, end=30 * MS, hid=2)
    builder.handoff(3, 1, submitted=40 * MS, kind="process")
    builder.call("worker.run", 1, start=41 * MS, end=50 * MS, puid=0x2, hid=3)
    builder.handoff(4, 1, submitted=60 * MS, kind="remote")
    builder.call("api.handle", 1, start=62 * MS, end=70 * MS, puid=0x3, hid=4)

    lines = render_text(build_tree(builder.data())).splitlines()

    assert lines[1:] == [
        "100 ms  shop.checkout  self 67.3 ms  MainThread (1) box:4242",
        "├─ 5.80 ms  shop.fetch  self 4.80 ms  ThreadPoolExecutor-0_1 (2) box:4242"
        '  → thread "ThreadPoolExecutor-0_1", queued 3.20 ms',
        "│  └─ 1.00 ms  shop.parse  self 1.00 ms  ThreadPoolExecutor-0_1 (2) box:4242",
        "├─ 9.88 ms  shop.notify  self 9.88 ms  MainThread (1) box:4242  → task, queued 120 µs",
        "├─ 9.00 ms  worker.run  self 9.00 ms  T1 (1) worker:77"
        "  → process worker:77, queued 1.00 ms",
        # Where a remote call landed is on the line already; the hop says only how it got there.
        "└─ 8.00 ms  api.handle  self 8.00 ms  T1 (1) api:88  → remote, queued 2.00 ms",
    ]


def test_a_sequence_from_a_foreign_system_reads_as_a_remote_call_in(builder):
    builder.process(pid=4242, host="api")
    builder.call("api.handle", 1, start=0, end=10 * MS, hid=0xF0F0)
    builder.call("api.load", 2, 1, start=1 * MS, end=4 * MS)

    assert render_text(build_tree(builder.data())).splitlines() == [
        "0123456789abcdef0123456789abcdef  complete  10.0 ms  2 calls · 1 thread · 1 process",
        "10.0 ms  <remote parent>  self 0 ns",
        "└─ 10.0 ms  api.handle  self 7.00 ms  T1 (1) api:4242  → remote",  # no queue time known
        "   └─ 3.00 ms  api.load  self 3.00 ms  T1 (1)",
    ]


def test_a_hop_mark_comes_before_the_error_mark_and_is_coloured(builder):
    builder.call("app.main", 1, start=0, end=1_000)
    builder.handoff(1, 1, submitted=0, kind="task")
    builder.call("app.fail", 2, 1, start=500, end=600, hid=1, error="KeyError")
    tree = build_tree(builder.data())

    assert render_text(tree).splitlines()[-1].endswith("→ task, queued 500 ns  ✗ KeyError")
    assert "\033[36m→ task, queued 500 ns\033[0m" in render_text(tree, color=True)


def test_frames_estimated_from_samples_are_drawn_apart(builder):
    builder.call("shop.checkout", 1, start=0, end=100 * MS, line=10)
    builder.call("shop.pay", 2, 1, start=50 * MS, end=60 * MS, line=20)
    builder.frame(1, "checkout", line=10)
    builder.frame(2, "Parser.parse", line=30, file="/srv/shop/io.py")
    builder.frame(3, "read", line=7, file="/usr/lib/python3.11/socket.py")
    builder.frame(4, "elsewhere", line=1)
    builder.sample(10 * MS, [1, 2, 3], duration=10 * MS, ticks=(15 * MS, 15 * MS))
    builder.sample(20 * MS, [1, 2], duration=10 * MS, ticks=(25 * MS, 25 * MS))
    # No frame of a call of the sequence: skipped.
    builder.sample(30 * MS, [4], duration=10 * MS, ticks=(35 * MS, 35 * MS))
    data = builder.data()
    tree = merge_samples(build_tree(data), data)

    lines = render_text(tree).splitlines()

    assert lines == [
        f"{data.seq.hex()}  complete  100 ms  "
        "2 calls · 1 thread · 1 process · 2 samples (1 skipped)",
        "100 ms  shop.checkout  self 70.0 ms  T1 (1) box:4242  2 samples",
        # seen by the ticks at 15 and 25 ms, no tick of the call before or after them (the one
        # at 35 showed none of its frames): started in [0, 15] (the call's start, the first
        # tick), ended in [25, 100] (the call's end): ±45 ms. read, seen at 15 ms and not at
        # 25: [0, 15] and [15, 25], ±12.5 ms.
        "├─ ~20.0 ms (±45.0 ms)  Parser.parse  shop/io.py:30  self 10.0 ms  2 samples",
        "│  └─ ~10.0 ms (±12.5 ms)  read  python3.11/socket.py:7  self 10.0 ms  1 sample",
        "└─ 10.0 ms  shop.pay  self 10.0 ms  T1 (1)",
    ]
    coloured = render_text(tree, color=True)
    assert "\033[2m~20.0 ms (±45.0 ms)  Parser.parse  shop/io.py:30" in coloured


def test_a_tree_without_merged_samples_says_nothing_about_them(builder):
    builder.call("shop.checkout", 1, start=0, end=100, line=10)
    builder.frame(1, "checkout", line=10)
    builder.sample(10, [1])

    text = render_text(build_tree(builder.data()))

    assert "sample" not in text

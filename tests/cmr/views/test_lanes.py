"""Timelines for speedscope and Chrome traces: every call on a track of its thread, properly
nested, at its true times; calls that overlap without nesting on an extra track."""

from __future__ import annotations

import json

import msgspec

from cmr.views.analyses.lanes import Track, lay_out
from cmr.views.model import KIND_ESTIMATED, Node, SequenceTree, walk
from cmr.views.render.chrome import render_chrome
from cmr.views.render.speedscope import render_speedscope, track_name
from cmr.views.tree.calltree import build_tree


def events(track: Track) -> list[tuple[str, str, int]]:
    return [("O" if e.opening else "C", e.slice.node.name, e.at_ns) for e in track.events]


def test_synchronous_calls_nest_on_one_track_per_thread(builder):
    builder.thread(1, "main")
    builder.thread(2, "pool")
    builder.call("app.root", 1, start=0, end=100)
    builder.call("app.a", 2, 1, start=10, end=20)
    builder.call("app.b", 3, 1, start=30, end=50)
    builder.call("app.c", 4, 3, start=35, end=40)
    builder.handoff(7, 1, submitted=12)
    builder.call("app.work", 5, 1, start=15, end=60, tid=2, hid=7)

    layout = lay_out(build_tree(builder.data()))

    assert [track_name(t) for t in layout.tracks] == ["box:4242 main (1)", "box:4242 pool (2)"]
    assert events(layout.tracks[0]) == [
        ("O", "app.root", 0),
        ("O", "app.a", 10),
        ("C", "app.a", 20),
        ("O", "app.b", 30),
        ("O", "app.c", 35),
        ("C", "app.c", 40),
        ("C", "app.b", 50),
        ("C", "app.root", 100),
    ]
    assert events(layout.tracks[1]) == [("O", "app.work", 15), ("C", "app.work", 60)]
    assert (layout.start_ns, layout.end_ns) == (0, 100)


def interleaved_tasks(builder) -> SequenceTree:
    """Two asyncio tasks of app.main interleave on its thread; the second calls app.step."""
    builder.call("app.main", 1, start=0, end=100)
    builder.handoff(11, 1, submitted=5, kind="task")
    builder.handoff(12, 1, submitted=6, kind="task")
    builder.call("app.first", 2, 1, start=10, end=50, hid=11)
    builder.call("app.second", 3, 1, start=12, end=40, hid=12)
    builder.call("app.step", 4, 3, start=20, end=30)
    return build_tree(builder.data())


def test_interleaved_tasks_get_an_extra_track_and_keep_their_times(builder):
    layout = lay_out(interleaved_tasks(builder))

    assert [(t.thread.tid, t.index) for t in layout.tracks] == [(1, 0), (1, 1)]
    assert events(layout.tracks[0]) == [
        ("O", "app.main", 0),
        ("O", "app.first", 10),
        ("C", "app.first", 50),
        ("C", "app.main", 100),
    ]
    # app.step runs inside app.first's window too, but app.second is its caller.
    assert events(layout.tracks[1]) == [
        ("O", "app.second", 12),
        ("O", "app.step", 20),
        ("C", "app.step", 30),
        ("C", "app.second", 40),
    ]


def test_an_extra_track_is_a_thread_of_its_own_in_a_chrome_trace(builder):
    trace = json.loads(render_chrome(interleaved_tasks(builder)))["traceEvents"]

    names = {e["tid"]: e["args"]["name"] for e in trace if e["name"] == "thread_name"}
    assert names == {1: "T1 (1)", 2: "T1 (1) #2"}
    tids = {e["name"]: e["tid"] for e in trace if e["ph"] == "X"}
    assert tids == {"app.main": 1, "app.first": 1, "app.second": 2, "app.step": 2}
    arrows = {(e["ph"], e["tid"], e["ts"]) for e in trace if e["ph"] in {"s", "f"}}
    assert arrows == {
        ("s", 1, 0.005),
        ("f", 1, 0.01),
        ("s", 1, 0.006),
        ("f", 2, 0.012),
    }


def test_an_open_call_lasts_until_its_caller_ended_or_the_latest_time_shown(builder):
    builder.thread(1, "main")
    builder.thread(2, "pool")
    builder.call("app.root", 1, start=0)  # still running
    builder.call("app.lost_end", 2, 1, start=10)  # its End was lost...
    builder.call("app.caller", 3, 1, start=5, end=30)  # ...(its caller had ended)
    builder.invocations[1] = msgspec.structs.replace(builder.invocations[1], parent=3)
    builder.handoff(7, 1, submitted=40)
    builder.call("app.work", 4, 1, start=50, end=150, tid=2, hid=7)

    layout = lay_out(build_tree(builder.data()))
    slices = {s.node.name: (s.start_ns, s.end_ns, s.open) for t in layout.tracks for s in t.slices}

    assert slices == {
        "app.root": (0, 150, True),
        "app.caller": (5, 30, False),
        "app.lost_end": (10, 30, True),
        "app.work": (50, 150, False),
    }


def estimated(name: str, start: int, end: int, duration: int, template: Node) -> Node:
    return msgspec.structs.replace(
        template,
        name=name,
        start_ns=start,
        end_ns=end,
        duration_ns=duration,
        self_ns=duration,
        kind=KIND_ESTIMATED,
        children=[],
        iid=0,
        handoff=None,
        frame=("app.py", name, 1),
    )


def test_estimated_calls_are_packed_inside_their_caller_around_its_measured_calls(builder):
    builder.call("app.root", 1, start=0, end=100)
    builder.call("app.measured", 2, 1, start=40, end=60)
    tree = build_tree(builder.data())
    root = tree.root
    # Samples of e1 fell over 10-90 and of e2 over 20-80; they account for 30 and 20.
    e1 = estimated("e1", 10, 90, 30, root)
    e1.children.append(estimated("e1a", 15, 30, 10, root))
    e2 = estimated("e2", 20, 80, 20, root)
    root.children += [e1, e2]

    layout = lay_out(tree)

    assert len(layout.tracks) == 1
    assert events(layout.tracks[0]) == [
        ("O", "app.root", 0),
        ("O", "e1", 10),
        ("O", "e1a", 15),
        ("C", "e1a", 25),
        ("C", "e1", 40),  # cut where app.measured starts
        ("O", "app.measured", 40),
        ("C", "app.measured", 60),
        ("O", "e2", 60),  # after e1, moved past app.measured
        ("C", "e2", 80),
        ("C", "app.root", 100),
    ]


def test_a_synthetic_root_has_no_track_and_a_remote_caller_no_arrow(builder):
    builder.call("app.handler", 1, start=10, end=20, hid=99)  # a foreign system called in
    tree = build_tree(builder.data())

    layout = lay_out(tree)
    trace = json.loads(render_chrome(tree))["traceEvents"]

    assert [s.node.name for t in layout.tracks for s in t.slices] == ["app.handler"]
    assert not [e for e in trace if e["ph"] in {"s", "f"}]
    assert json.loads(render_speedscope(tree))["profiles"][0]["endValue"] == 10


def test_a_ten_thousand_deep_chain_is_laid_out_without_recursion(builder):
    depth = 10_000
    for iid in range(1, depth + 1):
        builder.call(f"app.f{iid % 7}", iid, iid - 1, start=iid, end=3 * depth - iid)
    tree = build_tree(builder.data())

    layout = lay_out(tree)

    assert len(layout.tracks) == 1
    kinds = [e.opening for e in layout.tracks[0].events]
    assert kinds == [True] * depth + [False] * depth
    assert len(list(walk(tree.root))) == depth

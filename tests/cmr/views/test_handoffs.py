"""Hand-offs in the call tree: work that crossed threads, tasks and processes hangs under the
invocation that submitted it, with how long it waited."""

from __future__ import annotations

from cmr.views.model import Handoff, walk
from cmr.views.tree.calltree import build_tree

MS = 1_000_000


def by_name(tree):
    return {node.name: node for node, _ in walk(tree.root)}


def test_work_handed_to_a_pool_thread_hangs_under_its_submitter(builder, outline):
    builder.thread(1, "MainThread")
    builder.thread(2, "ThreadPoolExecutor-0_0")
    builder.call("shop.checkout", 1, start=0, end=10 * MS)
    builder.handoff(77, 1, submitted=1 * MS, kind="thread", callable_name="shop.fetch")
    builder.call("shop.fetch", 2, 1, start=4 * MS, end=9 * MS, tid=2, hid=77)
    builder.call("shop.parse", 3, 2, start=5 * MS, end=6 * MS, tid=2)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "shop.checkout 10000000/5000000 ok",
        "  shop.fetch 5000000/4000000 ok",
        "    shop.parse 1000000/1000000 ok",
    ]
    nodes = by_name(tree)
    assert nodes["shop.fetch"].handoff == Handoff(
        hid=77, kind="thread", submitted_ns=1 * MS, queued_ns=3 * MS
    )
    assert nodes["shop.fetch"].thread.name == "ThreadPoolExecutor-0_0"
    # Within a thread there is no hop.
    assert nodes["shop.checkout"].handoff is None
    assert nodes["shop.parse"].handoff is None
    assert (tree.threads, tree.status) == (2, "complete")


def test_the_hand_off_record_wins_over_the_start_parent(builder, outline):
    builder.call("app.main", 1, start=0, end=100)
    builder.call("app.spawner", 2, 1, start=10, end=20)
    builder.call("app.submitter", 3, 1, start=30, end=90)
    # The worker's Start names iid 2 (say, the thread was created there), but the hand-off says
    # iid 3 submitted the work: the hand-off is the better witness.
    builder.handoff(5, 3, submitted=40)
    builder.call("app.work", 4, 2, start=50, end=60, tid=2, hid=5)

    assert outline(build_tree(builder.data())) == [
        "app.main 100/30 ok",
        "  app.spawner 10/10 ok",
        "  app.submitter 60/50 ok",
        "    app.work 10/10 ok",
    ]


def test_several_invocations_sharing_one_task_hand_off_are_each_its_children(builder, outline):
    # An asyncio task whose untraced coroutine makes three traced calls at its top level.
    builder.call("app.main", 1, start=0, end=1_000)
    builder.handoff(9, 1, submitted=100, kind="task", callable_name="app.untraced_coroutine")
    for iid, start in [(2, 200), (3, 350), (4, 600)]:
        builder.call(f"app.step{iid}", iid, 1, start=start, end=start + 50, hid=9)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "app.main 1000/850 ok",
        "  app.step2 50/50 ok",
        "  app.step3 50/50 ok",
        "  app.step4 50/50 ok",
    ]
    assert [child.handoff for child in tree.root.children] == [
        Handoff(9, "task", 100, 100),
        Handoff(9, "task", 100, 250),
        Handoff(9, "task", 100, 500),
    ]


def test_a_hand_off_joins_a_child_process_to_its_parent_process(builder, outline):
    builder.process(0x1, pid=100, host="web")
    builder.process(0x2, pid=200, host="worker")
    builder.call("web.handle", 1, start=0, end=1_000, puid=0x1)
    builder.handoff(0xABC, 1, submitted=100, kind="process", puid=0x1)
    # The child's clock runs early: queue time floors at 0 rather than going negative.
    builder.call("worker.run", 1, start=50, end=900, puid=0x2, hid=0xABC)
    builder.call("worker.step", 2, 1, start=60, end=70, puid=0x2)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "web.handle 1000/150 ok",
        "  worker.run 850/840 ok",
        "    worker.step 10/10 ok",
    ]
    run = tree.root.children[0]
    assert (run.process.host, run.handoff) == ("worker", Handoff(0xABC, "process", 100, 0))
    assert tree.processes == 2


def test_without_the_hand_off_record_the_start_parent_links(builder, outline):
    builder.call("app.main", 1, start=0, end=100)
    builder.call("app.submitter", 2, 1, start=10, end=90)
    builder.call("app.work", 3, 2, start=20, end=30, tid=2, hid=404)  # Handoff never arrived

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "app.main 100/20 ok",
        "  app.submitter 80/70 ok",
        "    app.work 10/10 ok",
    ]
    assert by_name(tree)["app.work"].handoff is None  # no kind or submit time to show


def test_without_record_or_parent_the_continuation_is_an_orphan_under_the_root(builder, outline):
    builder.call("app.main", 1, start=0, end=100)
    builder.call("app.submitter", 2, 1, start=10, end=90)
    builder.call("app.work", 1, start=20, end=30, puid=0x2, hid=404)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "app.main 100/20 ok",  # its children cover 10..90 together
        "  app.submitter 80/80 ok",
        "  app.work 10/10 ok",
    ]


def test_a_hand_off_whose_submitter_is_missing_falls_back_then_hangs_under_the_root(
    builder, outline
):
    builder.call("app.main", 1, start=0, end=1_000)
    builder.call("app.caller", 2, 1, start=10, end=900)
    builder.handoff(7, 55, submitted=100)  # iid 55's Start was lost
    builder.call("app.same_process", 3, 2, start=200, end=300, tid=2, hid=7)
    builder.handoff(8, 56, submitted=400, kind="process")
    builder.call("app.other_process", 1, start=500, end=600, puid=0x2, hid=8)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "app.main 1000/110 ok",  # caller covers 10..900; other_process lies inside it
        "  app.caller 890/790 ok",
        "    app.same_process 100/100 ok",
        "  app.other_process 100/100 ok",
    ]
    # The hop itself is still known, wherever the node ended up.
    assert by_name(tree)["app.other_process"].handoff == Handoff(8, "process", 400, 100)


def test_a_continuation_is_never_the_root_even_when_it_starts_first(builder, outline):
    builder.handoff(3, 1, submitted=20, kind="process")
    builder.call("worker.run", 1, start=5, end=50, puid=0x2, hid=3)  # an early clock
    builder.call("app.main", 1, start=10, end=100)

    tree = build_tree(builder.data())

    # The child's window is clipped to its parent's: it covers 10..50 of main's 10..100.
    assert outline(tree) == ["app.main 90/50 ok", "  worker.run 45/45 ok"]


def test_forged_hand_offs_pointing_in_a_circle_lose_no_node(builder, outline):
    builder.call("app.main", 1, start=0, end=100)
    builder.handoff(1, 3, submitted=5)  # a's submitter is b ...
    builder.handoff(2, 2, submitted=5)  # ... and b's is a
    builder.handoff(3, 4, submitted=5)  # c claims to have submitted itself
    builder.call("app.a", 2, start=10, end=20, tid=2, hid=1)
    builder.call("app.b", 3, start=12, end=18, tid=3, hid=2)
    builder.call("app.c", 4, start=30, end=40, tid=4, hid=3)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        "app.main 100/80 ok",
        "  app.a 10/4 ok",
        "    app.b 6/6 ok",
        "  app.c 10/10 ok",
    ]

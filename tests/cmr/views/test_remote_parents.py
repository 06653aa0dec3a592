"""Sequences that a foreign system started: the first calls here continue a hand-off (the
foreign traceparent's parent-id) that no process of this repository recorded, so they hang under
a made-up ``<remote parent>``. The precedence against a true root and against ``<unknown root>``
(lost events) is what these tests pin down."""

from __future__ import annotations

from cmr.views.model import KIND_SYNTHETIC, UNKNOWN_ROOT, Handoff
from cmr.views.tree.calltree import REMOTE_PARENT, build_tree

FOREIGN = 0xF0F0  # the parent-id in the foreign caller's traceparent
SECOND_FOREIGN = 0xF0F1


def test_calls_from_a_foreign_system_hang_under_a_remote_parent(builder, outline):
    builder.process(pid=4242, host="api")
    builder.call("api.handle", 1, start=100, end=500, hid=FOREIGN)
    builder.call("api.load", 2, 1, start=150, end=300)
    builder.call("api.notify", 3, start=600, end=700, tid=2, hid=SECOND_FOREIGN)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        f"{REMOTE_PARENT} 600/100 ok",  # 500..600: between the two foreign calls
        "  api.handle 400/250 ok",
        "    api.load 150/150 ok",
        "  api.notify 100/100 ok",
    ]
    root = tree.root
    assert (root.kind, root.start_ns, root.end_ns, root.handoff) == (KIND_SYNTHETIC, 100, 700, None)
    handle, notify = root.children
    # The hop is known to be remote; when it was submitted, and so the queue time, is not.
    assert handle.handoff == Handoff(FOREIGN, "remote", None, None)
    assert notify.handoff == Handoff(SECOND_FOREIGN, "remote", None, None)
    assert handle.children[0].handoff is None
    # Nothing here is missing: the parent is merely elsewhere.
    assert tree.status == "complete"


def test_a_remote_parent_runs_while_its_calls_do_and_is_incomplete_when_one_never_ends(
    builder, outline
):
    builder.process(0x1)
    builder.process(0x2, ended=True)
    builder.call("api.handle", 1, start=100, hid=FOREIGN, puid=0x1)
    builder.call("job.run", 1, start=150, hid=SECOND_FOREIGN, puid=0x2)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        f"{REMOTE_PARENT} -/- running",
        "  api.handle -/- running",
        "  job.run -/- incomplete",
    ]
    assert tree.status == "running"

    builder.process(0x1, ended=True)
    assert build_tree(builder.data()).status == "incomplete"


def test_a_recorded_remote_hand_off_links_to_its_caller_with_its_queue_time(builder, outline):
    # Our own process injected the traceparent and recorded the hand-off: no remote parent.
    builder.process(0x1, pid=100, host="web")
    builder.process(0x2, pid=200, host="api")
    builder.call("web.checkout", 1, start=0, end=1_000, puid=0x1)
    builder.handoff(FOREIGN, 1, submitted=100, kind="remote", puid=0x1)
    builder.call("api.handle", 1, start=300, end=800, puid=0x2, hid=FOREIGN)

    tree = build_tree(builder.data())

    assert outline(tree) == ["web.checkout 1000/500 ok", "  api.handle 500/500 ok"]
    assert tree.root.children[0].handoff == Handoff(FOREIGN, "remote", 100, 200)


def test_a_true_root_wins_over_a_remote_parent(builder, outline):
    # An unrecorded hand-off next to a true root is a lost Handoff of ours, not a foreign call:
    # it is an orphan under the root, without a hop mark (as before remote parents existed).
    builder.call("app.main", 1, start=0, end=100)
    builder.call("app.work", 1, start=20, end=30, puid=0x2, hid=FOREIGN)

    tree = build_tree(builder.data())

    assert outline(tree) == ["app.main 100/90 ok", "  app.work 10/10 ok"]
    assert tree.root.children[0].handoff is None


def test_orphans_of_lost_events_join_the_remote_parent_without_a_hop(builder, outline):
    builder.process(ended=True)
    builder.call("api.handle", 1, start=100, end=500, hid=FOREIGN)
    builder.call("api.stray", 9, 8, start=200, end=250)  # parent 8's Start was lost

    tree = build_tree(builder.data())

    assert outline(tree) == [
        f"{REMOTE_PARENT} 400/0 ok",
        "  api.handle 400/400 ok",
        "  api.stray 50/50 ok",
    ]
    assert [child.handoff for child in tree.root.children] == [
        Handoff(FOREIGN, "remote", None, None),
        None,
    ]


def test_without_a_foreign_entry_lost_events_keep_the_unknown_root(builder, outline):
    builder.process(ended=True)
    builder.call("app.stray", 9, 8, start=200, end=250)  # parent 8's Start was lost
    # A continuation whose Start names a parent came from inside a process, not from abroad.
    builder.call("app.work", 4, 3, start=300, end=400, hid=FOREIGN)
    # A recorded hand-off whose submitter is missing: ours, with its Start lost.
    builder.handoff(0x77, 55, submitted=450)
    builder.call("app.job", 1, start=500, end=600, puid=0x2, hid=0x77)

    tree = build_tree(builder.data())

    assert outline(tree) == [
        f"{UNKNOWN_ROOT} 400/150 incomplete",  # children cover 250 of its 400
        "  app.stray 50/50 ok",
        "  app.work 100/100 ok",
        "  app.job 100/100 ok",
    ]
    assert [child.handoff for child in tree.root.children][:2] == [None, None]

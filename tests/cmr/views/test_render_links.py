"""The link a linked sequence's root carries to the call that queued it, drawn as a line of its
own under the root, before its log records; its attributes left off the call's line."""

from __future__ import annotations

from typing import Any

from cmr.views.render.links import link_lines
from cmr.views.render.terms import ANSI
from cmr.views.render.text import format_attributes, render_text
from cmr.views.tree.calltree import build_tree

MS = 1_000_000
LINK = {
    "link.seq": "4a1b2c3d4e5f60718293a4b5c6d7e8f9",
    "link.iid": "00000000000000a7",
    "link.puid": "1998b7ad0eb99780",
    "link.kind": "celery",
}


def test_the_link_goes_under_the_root_before_its_log_records(builder: Any) -> None:
    builder.process(pid=4242, host="box")
    builder.call("tasks.charge", 1, start=0, end=4 * MS)
    builder.call("tasks.bill", 2, 1, start=1 * MS, end=2 * MS)
    tree = build_tree(builder.data())
    tree.root.attributes = {"celery.task.state": "SUCCESS", **LINK, "log.0": "WARNING tasks: late"}
    assert render_text(tree).splitlines()[1:] == [
        "4.00 ms  tasks.charge  self 3.00 ms  T1 (1) box:4242  {celery.task.state=SUCCESS}",
        "│  ↪ linked from 4a1b2c3d4e5f:00000000000000a7 (celery)",
        "│  ⚠ WARNING tasks: late",
        "└─ 1.00 ms  tasks.bill  self 1.00 ms  T1 (1)",
    ]
    assert render_text(tree, color=True).splitlines()[2] == (
        f"│  {ANSI.cyan}↪ linked from 4a1b2c3d4e5f:00000000000000a7 (celery){ANSI.reset}"
    )


def test_a_link_without_a_sequence_draws_nothing_and_odd_values_stay_on_one_line() -> None:
    assert link_lines({"link.iid": "00000000000000a7"}) == []
    assert link_lines({"link.seq": 7}) == []
    assert link_lines({"link.seq": "abc\ndef", "link.kind": "x\x1b" + "y" * 40}) == [
        "↪ linked from abc\\ndef (x\\x1b" + "y" * 30 + ")"  # escaped, as in every text output
    ]
    assert format_attributes({**LINK, "celery.task.id": "7"}) == "{celery.task.id=7}"


def test_an_approximate_parent_is_said_under_the_call_and_left_off_its_line(builder: Any) -> None:
    builder.process(pid=4242, host="box")
    builder.call("app.handle", 1, start=0, end=4 * MS)
    builder.call("app.copied", 2, 1, start=1 * MS, end=2 * MS)
    tree = build_tree(builder.data())
    [child] = tree.root.children
    child.attributes = {"invoseq.parent": "approximate", "http.route": "/x"}
    assert render_text(tree).splitlines()[1:] == [
        "4.00 ms  app.handle  self 3.00 ms  T1 (1) box:4242",
        "└─ 1.00 ms  app.copied  self 1.00 ms  T1 (1)  {http.route=/x}",
        "      ≈ parent approximate (the context came without a hand-off)",
    ]
    assert link_lines({"invoseq.parent": "exact"}) == []

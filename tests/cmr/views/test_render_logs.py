"""The log records the tracer recorded on a call, drawn as lines of their own under it."""

from __future__ import annotations

from typing import Any

from cmr.views.model import SequenceTree
from cmr.views.render.logs import is_log_key, log_lines
from cmr.views.render.terms import ANSI
from cmr.views.render.text import format_attributes, render_text
from cmr.views.tree.calltree import build_tree

MS = 1_000_000


def shop(builder: Any) -> SequenceTree:
    builder.process(pid=4242, host="box")
    builder.call("shop.checkout", 1, start=0, end=10 * MS)
    builder.call("shop.price", 2, 1, start=1 * MS, end=4 * MS)
    builder.call("shop.lookup", 3, 2, start=2 * MS, end=3 * MS)
    builder.call("shop.pay", 4, 1, start=5 * MS, end=9 * MS)
    return build_tree(builder.data())


def test_the_records_go_under_their_call_where_its_guides_go(builder: Any) -> None:
    tree = shop(builder)
    checkout = tree.root
    [price, pay] = checkout.children
    checkout.attributes = {"log.0": "WARNING app: checking out"}
    price.attributes = {
        "http.method": "GET",
        "log.1": "ERROR app.pricing: no price for pear",
        "log.0": "WARNING app.pricing: stock low for apple",
        "log.dropped": 3,
    }
    pay.attributes = {"log.0": "WARNING app.pay: card\nexpired\x1b[31m"}

    assert render_text(tree).splitlines()[1:] == [
        "10.0 ms  shop.checkout  self 3.00 ms  T1 (1) box:4242",
        "│  ⚠ WARNING app: checking out",
        "├─ 3.00 ms  shop.price  self 2.00 ms  T1 (1)  {http.method=GET}",
        "│  │  ⚠ WARNING app.pricing: stock low for apple",
        "│  │  ⚠ ERROR app.pricing: no price for pear",
        "│  │  … 3 more log records dropped",
        "│  └─ 1.00 ms  shop.lookup  self 1.00 ms  T1 (1)",
        "└─ 4.00 ms  shop.pay  self 4.00 ms  T1 (1)",
        "      ⚠ WARNING app.pay: card ⏎ expired\\x1b[31m",  # escaped, as in every text output
    ]


def test_in_colour_warnings_are_yellow_errors_red_and_the_drop_count_dim(builder: Any) -> None:
    tree = shop(builder)
    tree.root.attributes = {
        "log.0": "WARNING app: slow",
        "log.1": "CRITICAL app: down",
        "log.dropped": 1,
    }
    lines = render_text(tree, color=True).splitlines()
    assert lines[2:5] == [
        f"│  {ANSI.yellow}⚠ WARNING app: slow{ANSI.reset}",
        f"│  {ANSI.red}⚠ CRITICAL app: down{ANSI.reset}",
        f"│  {ANSI.dim}… 1 more log record dropped{ANSI.reset}",
    ]


def test_only_the_tracers_keys_are_log_records() -> None:
    assert [is_log_key(k) for k in ("log.0", "log.17", "log.dropped")] == [True] * 3
    assert not any(is_log_key(k) for k in ("log.", "log.file.path", "log.٣", "logs.0", "log.-1"))
    attributes: dict[str, str | int | float | bool] = {
        "log.0": "WARNING app: slow",
        "log.file.path": "/var/log/app.log",
        "log.dropped": 2,
    }
    assert format_attributes(attributes) == "{log.file.path=/var/log/app.log}"
    assert log_lines(attributes) == ["⚠ WARNING app: slow", "… 2 more log records dropped"]
    assert log_lines({"http.method": "GET"}) == []

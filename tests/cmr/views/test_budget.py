"""A big sequence, stored through a real store, printed within a line budget: bounded output,
honest counts of what is hidden, and the full data still in the JSON."""

from __future__ import annotations

import json
import re

import pytest

from cmr.store import open_store
from cmr.views.model import walk
from cmr.views.pipeline import render_sequence, view_sequence
from cmr.views.render.json import iter_tree_json, tree_to_json
from cmr.views.render.text import render_text
from cmr.views.tree.calltree import build_tree
from invoseq import wire
from tests.cmr.cli_helpers import run

SEQ = bytes.fromhex("b16b00b5" + "00" * 12)
PUID = 0x5151
US = 1_000
STEPS, PRICES = 40, 100  # app.main -> 40 x app.step -> 100 x app.price each
CALLS = 1 + STEPS + STEPS * PRICES + 1  # and one app.slow, the longest call by far
NAMES = {1: "app.main", 2: "app.step", 3: "app.price", 4: "app.slow"}
FOLD = re.compile(r"… ([\d,]+) more calls?, total [^,:]+(?:, ([\d,]+) more beneath them)?")
CLOSING = re.compile(r"^… ([\d,]+) of ([\d,]+) calls hidden to keep within ([\d,]+) lines")


def big_sequence_events() -> list[wire.Event]:
    events: list[wire.Event] = [wire.Start(1, 0, 0, 1, 0, SEQ)]
    t, iid = 0, 1
    for _ in range(STEPS):
        iid += 1
        step = iid
        t += US
        events.append(wire.Start(step, 1, 0, 2, t, SEQ))
        for _ in range(PRICES):
            iid += 1
            events.append(wire.Start(iid, step, 0, 3, t + US, SEQ))
            t += 2 * US
            events.append(wire.End(iid, t))
        t += US
        events.append(wire.End(step, t))
    iid += 1
    events.append(wire.Start(iid, 1, 0, 4, t + US, SEQ))
    t += 1_000_000 * US
    events.append(wire.End(iid, t))
    events.append(wire.End(1, t + US))
    return events


@pytest.fixture(name="store", params=["memory", "sqlite"])
def fixture_store(request, tmp_path, make_batch, clock_offset_ns):
    store = (
        open_store(memory=True) if request.param == "memory" else open_store(str(tmp_path / "r"))
    )
    store.ingest(make_batch(PUID, 1, {1: big_sequence_events()}, methods=NAMES), clock_offset_ns)
    yield store
    store.close()


def tree_lines(text: str) -> list[str]:
    """The lines between the header and the closing line, guides stripped."""
    return [re.sub(r"^(\[\+\d+\] )?[│├└─ ]*", "", line) for line in text.splitlines()[1:-1]]


def number(text: str | None) -> int:
    return int(text.replace(",", "")) if text else 0


def test_a_big_tree_stays_within_its_budget_and_counts_what_it_hides(store):
    text = render_sequence(store, SEQ, max_nodes=150)

    lines = tree_lines(text)
    assert len(lines) <= 150
    shown = [line for line in lines if not line.startswith("…")]
    folds = [FOLD.match(line) for line in lines if line.startswith("…")]
    assert all(folds)
    hidden, total, budget = map(number, CLOSING.match(text.splitlines()[-1]).groups())
    assert (total, budget) == (CALLS, 150)
    assert hidden == CALLS - len(shown)
    assert sum(number(fold[1]) + number(fold[2]) for fold in folds if fold) == hidden
    assert "--max-nodes 0" in text.splitlines()[-1]
    assert "--json" in text.splitlines()[-1]


def test_the_longest_calls_come_first_and_repeated_calls_fold_into_one_line(store):
    lines = tree_lines(render_sequence(store, SEQ, max_nodes=60))

    assert any(" app.slow " in line for line in lines)  # the last call, but the longest
    assert lines[0].startswith("1.01 s  app.main")
    # A step's folded prices: the name and how often, with the time they took together.
    assert any(
        re.search("more calls, total .*: app\\.price \N{MULTIPLICATION SIGN}\\d+ \\(", line)
        for line in lines
    )


def test_the_json_of_a_big_tree_holds_every_call(store):
    tree = view_sequence(store, SEQ, None, 0)
    streamed = b"".join(iter_tree_json(tree))

    doc = json.loads(streamed)
    count, stack = 0, [doc["root"]]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node["children"])
    assert count == CALLS
    assert streamed.decode() == tree_to_json(tree)


def test_cmr_show_bounds_its_output_and_json_stays_complete(tmp_path, make_batch, capsys):
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    store.ingest(make_batch(PUID, 1, {1: big_sequence_events()}, methods=NAMES), 0)
    store.close()

    code, out, _ = run(capsys, "--db", path, "show", SEQ.hex()[:8], "--max-nodes", "100")
    assert code == 0
    assert len(out.splitlines()) <= 1 + 100 + 1
    assert CLOSING.match(out.splitlines()[-1])

    code, out, _ = run(capsys, "--db", path, "show", SEQ.hex()[:8], "--max-nodes", "0")
    assert (code, len(out.splitlines())) == (0, 1 + CALLS)

    code, out, _ = run(capsys, "--db", path, "show", SEQ.hex()[:8], "--json")
    assert code == 0
    assert out.count('"kind":"measured"') == CALLS


def test_a_tree_that_fits_prints_exactly_as_without_a_budget(store):
    tree = view_sequence(store, SEQ, None, 0)

    assert render_text(tree, max_nodes=CALLS) == render_text(tree)
    assert render_text(tree, max_nodes=CALLS - 1) != render_text(tree)
    assert len(tree_lines(render_text(tree, max_nodes=CALLS - 1))) <= CALLS - 1


def test_a_chain_deeper_than_the_budget_is_cut_without_recursion(builder):
    depth = 5_000
    for iid in range(1, depth + 1):
        builder.call("m.deep", iid, iid - 1, start=iid, end=3 * depth - iid)
    tree = build_tree(builder.data())

    text = render_text(tree, max_nodes=100)

    assert len(tree_lines(text)) <= 100
    assert number(CLOSING.match(text.splitlines()[-1]).group(1)) == depth - 99
    assert sum(1 for _ in walk(tree.root)) == depth  # the tree itself is whole


def test_a_negative_budget_is_refused(builder):
    builder.call("m.main", 1, start=0, end=10)

    with pytest.raises(ValueError, match="max_nodes"):
        render_text(build_tree(builder.data()), max_nodes=-1)

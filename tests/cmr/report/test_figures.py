"""Every figure of the report's header says what it counts, and "samples not placed" counts
what its title says: samples inside a traced call whose stack showed no traced call's frame,
not the samples outside every call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cmr.report import build_model, render_page
from cmr.report.schema import ReportModel
from tests.cmr.report.conftest import Browser, wait_until
from tests.cmr.views.conftest import SequenceBuilder

FACTS = ["seq", "started", "shown span", "calls", "threads", "processes", "samples not placed"]


def sampled_model() -> ReportModel:
    """One traced call on thread 1, and four samples: one it can place, one inside it that
    shows no traced call's frame, one after it ended, one of a thread with no call."""
    builder = SequenceBuilder()
    builder.call("app.m", 1, start=1_000, end=2_000, line=10)
    builder.frame(1, "m", line=10)
    builder.frame(5, "x", line=1, file="other.py")
    builder.sample(1_100, [1])  # under app.m: placed
    builder.sample(1_500, [5])  # inside app.m, but its stack shows no traced call: not placed
    builder.sample(2_500, [5])  # after every call of its thread: no call's, not counted
    builder.sample(1_500, [5], tid=7)  # a thread with no traced call: not counted either
    return build_model(builder.data())


def test_samples_not_placed_are_the_ones_inside_a_call_that_could_not_be_cut() -> None:
    assert sampled_model()["summary"]["samples_skipped"] == 1


@pytest.mark.browser
@pytest.mark.system
def test_every_figure_of_the_header_has_a_title_and_the_unclear_one_a_visible_word(
    browser: Browser, tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    report.write_text(render_page(sampled_model()), encoding="utf-8")
    page = browser.open(report.as_uri())
    try:
        wait_until(page, "window.invoseqReport && window.invoseqReport.readyAt !== null")
        facts: list[list[Any]] = page.eval_on_selector_all(
            "#facts > span",
            "items => items.map(item => [item.dataset.fact, item.title,"
            " (item.querySelector('.fact-note') || {}).textContent || ''])",
        )
        assert [fact for fact, _, _ in facts] == FACTS
        titles = [title for _, title, _ in facts]
        assert all(len(title) > 30 for title in titles)
        assert len(set(titles)) == len(titles)  # each its own meaning
        notes = {fact: note for fact, _, note in facts}
        assert (
            notes["samples not placed"] == " (not in the tree: their stack showed no traced call)"
        )
        assert not any(notes[fact] for fact in FACTS[:-1])  # the others speak for themselves
        skipped = page.locator("#facts > span[data-fact='samples not placed']").text_content()
        assert skipped.startswith("samples not placed 1 ")
        assert "inside a traced call" in titles[-1]
        assert page.get_attribute("#status", "title")
        assert page.get_attribute("#live", "title")
        assert page.evaluate("window.invoseqReport.search('app')") == 1
        assert page.get_attribute("#search-count", "title")
    finally:
        page.close()
    assert browser.blocked == []
    assert browser.errors == []

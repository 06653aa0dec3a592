"""The charts above `cmr ui`'s list in a real headless Chromium, on a repository filled by a real
traced program: one mark per listed sequence whatever the filters, a click opens a sequence, a
drag sets the filters, the histogram's percentiles are `cmr top`'s, and a running sequence's
mark follows it without a reload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from cmr.ages import moment_ns
from tests.cmr.ui.conftest import Repository
from tests.cmr.ui.ui_support import UI, filled_repository, live_program, running_ui
from tests.support import cmr_json, read_line, say

pytestmark = [pytest.mark.system, pytest.mark.browser]

#: 30 checkouts lasting from microseconds to 45 ms, every seventh raising, and 4 slower browses.
SHOP = """
import time
import tracer

PAUSES_MS = (0, 1, 3, 8, 20, 45)

@tracer.traced
def checkout(n):
    time.sleep(PAUSES_MS[n % len(PAUSES_MS)] / 1000)
    if n % 7 == 3:
        raise ValueError("card declined")
    return charge(n)

@tracer.traced
def charge(n):
    return n * 2

@tracer.traced
def browse():
    time.sleep(0.06)

for n in range(30):
    try:
        checkout(n)
    except ValueError:
        pass
    if n % 8 == 0:
        browse()
"""
SEQUENCES = 34


@pytest.fixture(name="shop_db", scope="module")
def fixture_shop_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return filled_repository(tmp_path_factory.mktemp("charts"), SHOP)


@pytest.fixture(name="shop_ui", scope="module")
def fixture_shop_ui(shop_db: Path) -> Iterator[UI]:
    with running_ui(shop_db) as ui:
        yield ui


@pytest.fixture(name="page")
def fixture_page(browser: Any) -> Iterator[Any]:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    yield page
    page.close()


def marks(page: Any) -> list[str]:
    seqs: list[str] = page.eval_on_selector_all(
        "#scatter .dot", "dots => dots.map(dot => dot.dataset.seq)"
    )
    return seqs


def rows(page: Any) -> list[str]:
    seqs: list[str] = page.eval_on_selector_all(
        "#sequences tbody tr[data-seq]", "rows => rows.map(row => row.dataset.seq)"
    )
    return seqs


def centres(page: Any) -> dict[str, tuple[float, float]]:
    """Where each mark is on the screen."""
    found: dict[str, list[float]] = page.eval_on_selector_all(
        "#scatter .dot",
        """dots => Object.fromEntries(dots.map(dot => {
             const box = dot.getBoundingClientRect();
             return [dot.dataset.seq, [box.x + box.width / 2, box.y + box.height / 2]];
           }))""",
    )
    return {seq: (x, y) for seq, (x, y) in found.items()}


def plot_box(page: Any) -> dict[str, float]:
    box: dict[str, float] = page.locator("#scatter .plot").bounding_box()
    return box


def drag(page: Any, start: tuple[float, float], end: tuple[float, float]) -> None:
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move(*end, steps=8)
    page.mouse.up()


def selected(listed: list[dict[str, Any]], url: str) -> set[str]:
    """The sequences the filters of ``url`` select among ``listed``, by their own figures."""
    query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
    since = moment_ns(query["since"]) if "since" in query else None
    until = moment_ns(query["until"]) if "until" in query else None
    low = float(query["min_ms"]) * 1e6 if "min_ms" in query else None
    high = float(query["max_ms"]) * 1e6 if "max_ms" in query else None
    return {
        line["seq"]
        for line in listed
        if (since is None or line["start_ns"] >= since)
        and (until is None or line["start_ns"] <= until)
        and (low is None or line["duration_ns"] >= low)
        and (high is None or line["duration_ns"] <= high)
    }


@pytest.mark.parametrize(
    "query",
    [
        "",
        "status=error",
        "min_ms=5",
        "max_ms=5",
        "root=__main__.browse",
        "method=__main__.charge",
        "sort=duration&limit=5",
        "limit=7",
    ],
)
def test_one_mark_per_listed_sequence_whatever_the_filters(
    shop_ui: UI, page: Any, query: str
) -> None:
    page.goto(f"{shop_ui.url}?{query}")
    listed = rows(page)
    assert listed
    assert sorted(marks(page)) == sorted(listed)
    assert len(marks(page)) < SEQUENCES or query == ""
    ended = page.text_content("#histogram .caption")
    assert ended is not None
    assert ended.startswith(f"{len(listed)} of {len(listed)} ended")  # every one ended here


def test_a_click_on_a_mark_opens_its_sequence(shop_ui: UI, page: Any) -> None:
    page.goto(f"{shop_ui.url}?sort=duration&limit=1000")
    slowest = rows(page)[0]  # drawn last: on top of any neighbour
    page.locator(f"#scatter .dot[data-seq='{slowest}']").click()
    page.wait_for_url(f"**/seq/{slowest}")
    page.wait_for_function("() => window.invoseqReport && window.invoseqReport.barCount > 0")


def test_a_drag_over_a_box_filters_the_list_by_its_times_and_durations(
    shop_ui: UI, page: Any
) -> None:
    listed: list[dict[str, Any]] = shop_ui.json("/api/sequences?limit=1000")
    page.goto(f"{shop_ui.url}?limit=1000&root=__main__.*")
    plot = plot_box(page)
    start = (plot["x"] + 0.3 * plot["width"], plot["y"] + 0.2 * plot["height"])
    end = (plot["x"] + 0.7 * plot["width"], plot["y"] + 0.8 * plot["height"])
    inside = {
        seq
        for seq, (x, y) in centres(page).items()
        if start[0] <= x <= end[0] and start[1] <= y <= end[1]
    }
    assert inside
    drag(page, start, end)
    page.wait_for_url("**max_ms=**")
    query = parse_qs(urlsplit(page.url).query)
    assert set(query) == {"limit", "root", "since", "until", "min_ms", "max_ms"}
    assert query["root"] == ["__main__.*"]  # the other filters kept
    after = set(rows(page))
    assert inside <= after  # every mark in the box is listed…
    assert after == selected(listed, page.url)  # …and what the filters say, no more
    assert len(after) < len(listed)
    assert sorted(marks(page)) == sorted(after)  # the scatter follows


def test_a_drag_along_an_axis_filters_by_that_one_only(shop_ui: UI, page: Any) -> None:
    listed: list[dict[str, Any]] = shop_ui.json("/api/sequences?limit=1000")
    page.goto(f"{shop_ui.url}?limit=1000")
    plot = plot_box(page)
    below = plot["y"] + plot["height"] + 8
    drag(page, (plot["x"] + 0.2 * plot["width"], below), (plot["x"] + 0.5 * plot["width"], below))
    page.wait_for_url("**until=**")
    assert set(parse_qs(urlsplit(page.url).query)) == {"limit", "since", "until"}
    after = set(rows(page))
    assert after == selected(listed, page.url)
    assert 0 < len(after) < len(listed)

    page.goto(f"{shop_ui.url}?limit=1000")
    left = plot["x"] - 20
    drag(page, (left, plot["y"] + 0.3 * plot["height"]), (left, plot["y"] + 0.7 * plot["height"]))
    page.wait_for_url("**max_ms=**")
    assert set(parse_qs(urlsplit(page.url).query)) == {"limit", "min_ms", "max_ms"}
    after = set(rows(page))
    assert after == selected(listed, page.url)
    assert 0 < len(after) < len(listed)


def test_the_histograms_percentiles_are_cmr_tops(shop_ui: UI, shop_db: Path, page: Any) -> None:
    (top,) = cmr_json(shop_db, "top", "--root", "__main__.checkout")
    page.goto(f"{shop_ui.url}?root=__main__.checkout&limit=1000")
    assert len(rows(page)) == top["count"] == 30
    for label in ("p50", "p90", "p99"):
        marker = page.locator(f"#histogram .pct[data-pct='{label}']")
        assert int(marker.get_attribute("data-ns")) == top[f"{label}_ns"]
        assert marker.locator("text").text_content().startswith(f"{label} ")
    bars = page.eval_on_selector_all(
        "#histogram .band", "bands => bands.map(band => Number(band.dataset.count))"
    )
    assert sum(bars) == 30


def test_a_running_sequences_mark_follows_it_without_a_reload(
    repository: Repository, tmp_path: Path, browser: Any
) -> None:
    with (
        running_ui(repository.db) as ui,
        live_program(tmp_path, repository.endpoint, rounds=1) as program,
    ):
        assert read_line(program, 60) == "round 0\n"
        (summary,) = ui.json("/api/sequences")
        page = browser.new_page()
        page.goto(ui.url)
        mark = page.locator(f"#scatter .dot[data-seq='{summary['seq']}']")
        assert mark.get_attribute("class") == "dot s-running"
        assert "0 of 1 ended" in (page.text_content("#histogram .caption") or "")
        page.evaluate("() => { window.stillThisPage = true; }")
        say(program, "go")
        assert program.wait(60) == 0
        page.wait_for_function(
            "seq => document.querySelector(`#scatter .dot[data-seq='${seq}']`)"
            ".classList.contains('s-complete')",
            arg=summary["seq"],
            timeout=60_000,
        )
        assert "1 of 1 ended" in (page.text_content("#histogram .caption") or "")
        assert page.locator("#histogram .pct").count() == 3
        assert page.evaluate("() => window.stillThisPage") is True
        page.close()


def test_every_figure_of_the_pages_says_what_it_counts(shop_ui: UI, page: Any) -> None:
    page.goto(shop_ui.url)
    assert page.get_attribute("#count", "title")
    untitled = "els => els.filter(el => !el.querySelector(':scope > title')).length"
    assert page.eval_on_selector_all("#scatter .dot", untitled) == 0
    assert page.eval_on_selector_all("#histogram .band, #histogram .pct", untitled) == 0
    assert page.locator("#histogram .pct").count() == 3
    for path in ("/", "/top", "/top?by=method"):
        page.goto(shop_ui.url + path.lstrip("/"))
        titles = page.eval_on_selector_all("th", "ths => ths.map(th => th.title)")
        assert len(titles) >= 7
        assert all(len(title) > 15 for title in titles), (path, titles)
    assert "nearest-rank percentiles" in (page.text_content("#about") or "")

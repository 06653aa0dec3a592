"""``cmr report`` of a real sequence across threads and processes, opened in headless Chromium.

The sequence comes from a real traced program (tests/cmr/report/scenario.py) sending to a real
``cmr serve``; what the page draws is checked against ``cmr show --samples --json`` of the same
sequence, through the page's test hook (``window.invoseqReport``) and its DOM, with real mouse
clicks on the canvas. The browser may read files only: any other request fails the test.
Screenshots go to the artifacts directory (see conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cmr.report.conftest import Browser, save_screenshot, wait_until
from tests.cmr.report.scenario import SCRIPT
from tests.support import cmr, cmr_json, cmr_server, run_traced, write_script

pytestmark = [pytest.mark.browser, pytest.mark.system]


@dataclass(frozen=True)
class Shop:
    seq: str
    report: Path
    tree: dict[str, Any]  # `cmr show --samples --json`
    critical: list[str]  # the names along `cmr show --samples --critical-path --json`


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current["children"])


@pytest.fixture(name="shop", scope="module")
def fixture_shop(tmp_path_factory: pytest.TempPathFactory) -> Shop:
    tmp = tmp_path_factory.mktemp("shop")
    db = tmp / "cmr.sqlite"
    script = write_script(tmp / "shop.py", SCRIPT)
    with cmr_server(db) as endpoint:
        run_traced(script, endpoint)
    [summary] = cmr_json(db, "ls")
    report = tmp / "checkout.html"
    cmr(db, "report", summary["seq"][:8], "-o", str(report))
    tree = cmr_json(db, "show", summary["seq"], "--samples")
    path = cmr_json(db, "show", summary["seq"], "--samples", "--critical-path")["path"]
    return Shop(summary["seq"], report, tree, [step["name"] for step in path])


@pytest.fixture(name="page")
def fixture_page(browser: Browser, shop: Shop) -> Iterator[Any]:
    page = browser.open(shop.report.as_uri())
    yield page
    page.close()
    assert browser.blocked == [], "the report asked for something beyond its own file"
    assert browser.errors == []


def hook(page: Any, expression: str) -> Any:
    return page.evaluate(f"window.invoseqReport.{expression}")


def test_lanes_are_the_processes_and_threads_of_the_sequence(page: Any, shop: Shop) -> None:
    expected = {
        f"{n['process']['host']}:{n['process']['pid']} / {n['thread']['name']}"
        for n in nodes(shop.tree["root"])
    }
    lanes = hook(page, "lanes")
    assert len(lanes) == len(expected)
    assert set(lanes) == expected
    assert len({lane.split(" / ")[0] for lane in lanes}) == 3  # the program and two workers
    assert any(" / pricer_" in lane for lane in lanes)
    assert hook(page, "violations") == []


def test_every_figure_of_the_header_says_what_it_counts(page: Any) -> None:
    facts = page.eval_on_selector_all(
        "#facts > span", "items => items.map(item => [item.dataset.fact, item.title])"
    )
    assert [fact for fact, _ in facts][:6] == [
        "seq",
        "started",
        "shown span",
        "calls",
        "threads",
        "processes",
    ]
    assert all(len(title) > 20 for _, title in facts)
    assert page.get_attribute("#status", "title")  # the status word too


def test_every_call_is_a_bar_and_every_hand_off_an_arrow(page: Any, shop: Shop) -> None:
    all_nodes = list(nodes(shop.tree["root"]))
    handoffs = [n for n in all_nodes if n["handoff"] and n["handoff"]["submitted_ns"] is not None]
    assert hook(page, "barCount") == len(all_nodes)
    assert hook(page, "arrowCount") == len(handoffs) == 6  # 4 to the threads, 2 to processes
    assert hook(page, "status") == "complete"


def test_clicking_a_bar_shows_its_details(page: Any, shop: Shop, artifacts: Path) -> None:
    [failed] = [b for b in hook(page, "barsNamed('__main__.price_item')") if b["error"]]
    [node] = [n for n in nodes(shop.tree["root"]) if n["error"] == "LookupError"]
    page.evaluate(f"window.invoseqReport.reveal({failed['index']})")
    box = hook(page, f"barRect({failed['index']})")
    assert box is not None
    page.mouse.click(box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
    assert hook(page, "selected()") == {"view": "bar", "index": failed["index"]}

    def detail(key: str) -> str:
        text: str = page.get_by_test_id(f"detail-{key}").inner_text()
        return text

    assert detail("name") == "__main__.price_item"
    assert detail("error") == "LookupError"
    assert detail("status") == "error"
    assert detail("seq") == shop.seq
    assert detail("iid") == failed["iid"].rjust(16, "0")
    host_pid = f"{node['process']['host']}:{node['process']['pid']}"
    assert detail("process") in (host_pid, f"{host_pid} (ended)")  # the process has exited
    assert detail("puid") == f"{node['process']['puid']:016x}"
    assert detail("thread") == f"{node['thread']['name']} ({node['thread']['tid']})"
    assert detail("duration").endswith(("ms", "µs"))
    assert detail("self").endswith(("ms", "µs", "ns"))
    assert detail("logs") == "⚠ WARNING shop.pricing: no price for item 3"
    assert "log.0" not in detail("attributes")  # shown as a log record, not an attribute
    save_screenshot(page, artifacts, "report-details.png")


def test_the_critical_path_is_marked_and_said_in_the_details(page: Any, shop: Shop) -> None:
    critical = hook(page, "critical()")
    assert [hook(page, f"names({index})") for index in critical] == shop.critical
    assert len(critical) >= 2
    last = critical[-1]
    page.evaluate(f"window.invoseqReport.select({last})")
    assert page.get_by_test_id("detail-critical").inner_text().startswith("on it")
    first_off = next(
        i for i in range(page.evaluate("window.invoseqReport.barCount")) if i not in critical
    )
    page.evaluate(f"window.invoseqReport.select({first_off})")
    assert page.get_by_test_id("detail-critical").count() == 0


def test_search_highlights_the_calls_of_that_name(page: Any, shop: Shop, artifacts: Path) -> None:
    count = page.get_by_test_id("search-count")
    for query in ("__main__.price_item", "PRICE"):  # case-insensitive, any part of the name
        names = [n["name"] for n in nodes(shop.tree["root"])]
        expected = sum(query.lower() in name.lower() for name in names)
        assert expected >= 4
        page.get_by_test_id("search").fill(query)
        count.filter(has_text=f"{expected} calls").wait_for()
        assert count.get_attribute("data-count") == str(expected)
    save_screenshot(page, artifacts, "report-search.png")
    page.get_by_test_id("search").fill("")
    wait_until(page, "document.getElementById('search-count').dataset.count === '0'")
    assert count.inner_text() == ""


def test_timeline_screenshot(page: Any, artifacts: Path) -> None:
    selected = hook(page, "selectByName('__main__.checkout')")
    assert selected == 0  # the root comes first
    page.get_by_test_id("reset").click()
    path = save_screenshot(page, artifacts, "report-timeline.png")
    assert path.stat().st_size > 10_000  # a picture, not a blank page


def test_flame_graph_and_icicle_of_the_merged_samples(page: Any, artifacts: Path) -> None:
    assert hook(page, "flameCount") > 1
    for tab, inverted in (("flame", False), ("icicle", True)):
        page.get_by_test_id(f"tab-{tab}").click()
        canvas = page.get_by_test_id(tab)
        assert canvas.is_visible()
        assert not page.get_by_test_id("timeline").is_visible()
        box = canvas.bounding_box()
        root_y = box["y"] + 13 if inverted else box["y"] + box["height"] - 13
        page.mouse.click(box["x"] + 40, root_y)  # the root frame spans the whole width
        assert page.get_by_test_id("detail-name").inner_text() == "__main__.checkout"
        assert page.get_by_test_id("detail-calls").inner_text() == "1"
        save_screenshot(page, artifacts, f"report-{tab}.png")

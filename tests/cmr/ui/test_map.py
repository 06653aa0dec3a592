"""`cmr ui`'s map page in a real headless Chromium, over a SQLite repository of three orders
across five processes: one box per service, one arrow per hand-off kind between two services,
no two boxes overlapping, a click on an edge listing its sequences; the list page links to the
map of what it lists; the JSON and a bad filter."""

from __future__ import annotations

from pathlib import Path

import pytest

from cmr.store import open_store
from tests.cmr.services_scenario import SEQS, write_orders
from tests.cmr.ui.ui_support import running_ui


@pytest.fixture(name="orders")
def fixture_orders(tmp_path: Path, make_batch) -> Path:
    db = tmp_path / "cmr.sqlite"
    store = open_store(str(db))
    try:
        write_orders(store, make_batch)
    finally:
        store.close()
    return db


#: A point on a path, a third of the way along, in the page's coordinates.
_ON_THE_LINE = """path => {
  const at = path.getPointAtLength(path.getTotalLength() / 3);
  const m = path.getScreenCTM();
  return [at.x * m.a + at.y * m.c + m.e, at.x * m.b + at.y * m.d + m.f];
}"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_in_a_browser_the_map_draws_each_service_and_edge_and_lists_an_edge_s_sequences(
    orders, browser
):
    with running_ui(orders) as ui:
        page = browser.new_page()
        page.goto(ui.url + "?root=client.*")
        page.click("#map-link")
        page.wait_for_url("**/map?root=client.%2A")

        services = page.locator("svg#map g.box")
        names = sorted(services.nth(i).get_attribute("data-service") for i in range(5))
        assert services.count() == 5
        assert names == ["client", "pricing", "report", "storefront", "tasks"]
        boxes = [services.nth(i).locator("rect").bounding_box() for i in range(5)]
        assert all(box is not None for box in boxes)
        for at, box in enumerate(boxes):
            for other in boxes[at + 1 :]:
                assert not _overlap(box, other), (box, other)
        edges = page.locator("svg#map a.edge")
        drawn = {
            (
                edges.nth(i).get_attribute("data-source"),
                edges.nth(i).get_attribute("data-target"),
                edges.nth(i).get_attribute("data-kind"),
                edges.nth(i).locator("text").text_content(),
            )
            for i in range(edges.count())
        }
        assert drawn == {
            ("client", "storefront", "http", "http · 3"),
            ("storefront", "pricing", "http", "http · 3"),
            ("storefront", "report", "process", "process · 3"),
            ("pricing", "tasks", "queue", "queue · 3 · 1 err"),
        }

        queue = page.locator("svg#map a.edge[data-kind=queue]")
        listed = page.locator(".edge-list:target tbody tr")
        assert listed.count() == 0  # no edge's list shows before a click
        x, y = queue.locator("path.line").evaluate(_ON_THE_LINE)
        page.mouse.click(x, y)  # on the arrow itself, a third of the way along
        page.wait_for_url("**#edge-*")
        assert (
            page.locator(".edge-list:target h2")
            .inner_text()
            .startswith("pricing → tasks  queue  3 calls  1 error")
        )
        assert listed.count() == 3
        assert [listed.nth(i).get_attribute("data-seq") for i in range(3)] == [
            seq.hex() for seq in reversed(SEQS)
        ]
        listed.nth(0).locator("td.seq a").click()
        page.wait_for_url(f"**/seq/{SEQS[2].hex()}")


def test_the_map_s_json_a_bad_filter_and_an_empty_selection(orders):
    with running_ui(orders) as ui:
        found = ui.json("/api/map?limit=2")
        assert (found["sequences"], found["bounded"]) == (2, True)
        assert {edge["count"] for edge in found["edges"]} == {2}
        bad = ui.get("/map?min_ms=abc")
        assert bad.status == 400
        assert "min_ms: expected milliseconds or a number and a unit" in bad.body
        assert "got &#x27;abc&#x27;" in bad.body
        assert ui.get("/api/map?colour=red").status == 400
        counted = ui.get("/map")
        assert "<p id='count'>5 services and 4 edges over 3 sequences. " in counted.body
        empty = ui.get("/map?root=nothing.*")
        assert empty.status == 200
        assert "<p id='count'>no sequences match</p>" in empty.body
        assert "<svg" not in empty.body

"""A report of a 100,000-call sequence opens, becomes interactive and answers a search and a
click within a generous bound. The figures are printed; docs/performance.md records them.

The sequence is built the way benchmarks/views.py builds its repositories: synthetic batches
(fan-out 10, depth-first, one thread) ingested into a real SQLite store.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.cmr.report.conftest import Browser, save_screenshot
from tests.support import cmr, store_one_sequence

pytestmark = [pytest.mark.browser, pytest.mark.system, pytest.mark.timing]

CALLS = 100_000
#: Opening the page (parse, decode, index, first draw) on this loaded 2-core machine: generous.
INTERACTIVE_WITHIN_S = 30.0
#: A search or a click once the page is up.
RESPONSE_WITHIN_S = 5.0


@pytest.fixture(name="large_report", scope="module")
def fixture_large_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    tmp = tmp_path_factory.mktemp("large")
    db = tmp / "large.sqlite"
    seq = store_one_sequence(db, CALLS)
    report = tmp / "large.html"
    started = time.perf_counter()
    cmr(db, "report", seq, "-o", str(report))
    return report, time.perf_counter() - started


def test_a_100k_call_report_becomes_interactive_quickly(
    browser: Browser, large_report: tuple[Path, float], artifacts: Path, capsys: Any
) -> None:
    report, written_s = large_report
    started = time.perf_counter()
    page = browser.open(report.as_uri())
    try:
        interactive_s = time.perf_counter() - started
        ready_ms = page.evaluate("window.invoseqReport.readyAt")
        assert page.evaluate("window.invoseqReport.barCount") == CALLS
        assert interactive_s < INTERACTIVE_WITHIN_S

        started = time.perf_counter()
        page.get_by_test_id("search").fill("handler_7")
        count = page.get_by_test_id("search-count")
        count.filter(has_text="calls").wait_for()
        found = int(count.get_attribute("data-count") or 0)
        search_s = time.perf_counter() - started
        assert 0 < found < CALLS

        started = time.perf_counter()
        box = page.evaluate("window.invoseqReport.barRect(0)")  # the root
        page.mouse.click(box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
        page.get_by_test_id("detail-name").wait_for()
        click_s = time.perf_counter() - started
        assert page.get_by_test_id("detail-name").inner_text() == "app.module.handler_1"
        assert search_s < RESPONSE_WITHIN_S
        assert click_s < RESPONSE_WITHIN_S
        save_screenshot(page, artifacts, "report-100k.png")
    finally:
        page.close()
    assert browser.blocked == []
    assert browser.errors == []
    with capsys.disabled():
        size_mib = report.stat().st_size / 2**20
        print(
            f"\n100k-call report: cmr report {written_s:.1f} s, {size_mib:.1f} MiB; "
            f"interactive {interactive_s:.2f} s after navigation (readyAt {ready_ms:.0f} ms); "
            f"search {search_s * 1000:.0f} ms ({found} calls); click {click_s * 1000:.0f} ms"
        )

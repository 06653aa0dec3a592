"""`cmr ui` while a traced program is still inside its root call: listed as running, its model
grows as calls arrive, and it turns complete once the program lets go. The program waits on its
stdin, so each step happens when the test says, never after a sleep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cmr.ui.conftest import Repository
from tests.cmr.ui.ui_support import UI, calls_after, live_program, running_ui
from tests.support import read_line, run_traced, say, wait_for, write_script

pytestmark = pytest.mark.system

OTHER = """
import tracer

@tracer.traced
def other():
    return 1

other()
"""


def only_seq(ui: UI, query: str) -> str:
    (summary,) = ui.json(f"/api/sequences?{query}")
    seq: str = summary["seq"]
    return seq


def test_a_running_sequence_is_listed_running_then_complete(
    repository: Repository, tmp_path: Path
) -> None:
    with running_ui(repository.db) as ui:
        assert ui.json("/api/sequences") == []
        with live_program(tmp_path, repository.endpoint, rounds=1) as program:
            assert read_line(program, 60) == "round 0\n"
            (summary,) = ui.json("/api/sequences?status=running")
            assert summary["root"] == "__main__.watch"
            assert summary["invocations"] == calls_after(0)
            assert summary["duration_ns"] is None
            seq = summary["seq"]
            # Still running, it has lasted at least until now: a minimum duration lets it in.
            assert only_seq(ui, "min_ms=0&method=tick") == seq
            page = ui.get("/?status=running")
            assert f"data-seq='{seq}' data-status='running'" in page.body
            assert "so far" in page.body
            say(program, "go")
            assert program.wait(60) == 0
        wait_for(lambda: ui.json("/api/sequences?status=complete"))
        assert only_seq(ui, "status=complete") == seq
        assert ui.json("/api/sequences?status=running") == []


def test_the_model_grows_while_running_and_the_view_stops_polling_once_complete(
    repository: Repository, tmp_path: Path
) -> None:
    with (
        running_ui(repository.db) as ui,
        live_program(tmp_path, repository.endpoint, rounds=2) as program,
    ):
        assert read_line(program, 60) == "round 0\n"
        seq = only_seq(ui, "")
        model_url = f"/api/seq/{seq}/model"
        view = ui.get(f"/seq/{seq[:8]}")
        assert view.status == 200
        assert model_url in view.body  # what the page polls while the sequence runs
        model = ui.json(model_url)
        assert model["summary"]["status"] == "running"
        assert model["summary"]["invocations"] == calls_after(0)
        assert len(model["bars"]["name"]) == calls_after(0)

        say(program, "next")
        assert read_line(program, 60) == "round 1\n"
        model = ui.json(model_url)
        assert model["summary"]["status"] == "running"
        assert model["summary"]["invocations"] == calls_after(1)
        assert len(model["bars"]["name"]) == calls_after(1)

        say(program, "next")
        assert program.wait(60) == 0
        model = wait_for(lambda: complete_model(ui, model_url))
        assert model["summary"]["invocations"] == calls_after(1)
        assert model_url not in ui.get(f"/seq/{seq}").body  # nothing left to poll for


def complete_model(ui: UI, url: str) -> dict[str, Any] | None:
    model: dict[str, Any] = ui.json(url)
    return model if model["summary"]["status"] == "complete" else None


@pytest.mark.browser
def test_in_a_browser_filter_open_a_running_sequence_and_watch_it_grow(
    repository: Repository, tmp_path: Path, browser: Any
) -> None:
    run_traced(write_script(tmp_path / "other.py", OTHER), repository.endpoint)
    with (
        running_ui(repository.db) as ui,
        live_program(tmp_path, repository.endpoint, rounds=2) as program,
    ):
        assert read_line(program, 60) == "round 0\n"
        seq = only_seq(ui, "method=tick")

        listing = browser.new_page()
        listing.goto(ui.url)
        rows = listing.locator("#sequences tbody tr")
        assert rows.count() == 2
        listing.fill("input[name=method]", "tick")
        listing.select_option("select[name=status]", "running")
        listing.click("button[type=submit]")
        listing.wait_for_url("**status=running**")
        assert rows.count() == 1
        assert rows.first.get_attribute("data-seq") == seq
        listing.evaluate("() => { window.stillThisPage = true; }")

        view = browser.new_page()
        view.goto(listing.url)
        view.locator(f"#sequences tr[data-seq='{seq}'] td.root a").click()
        view.wait_for_url(f"**/seq/{seq}")
        view.wait_for_function(
            "n => window.invoseqReport && window.invoseqReport.barCount === n", arg=calls_after(0)
        )
        assert view.evaluate("() => window.invoseqReport.status") == "running"
        view.evaluate("() => { window.stillThisPage = true; }")

        say(program, "next")
        assert read_line(program, 60) == "round 1\n"
        view.wait_for_function(
            "n => window.invoseqReport.barCount === n", arg=calls_after(1), timeout=60_000
        )
        say(program, "next")
        assert program.wait(60) == 0
        view.wait_for_function("() => window.invoseqReport.status === 'complete'", timeout=60_000)
        assert view.evaluate("() => window.invoseqReport.barCount") == calls_after(1)
        assert view.evaluate("() => window.stillThisPage") is True  # updated, never reloaded

        # The list of running sequences kept itself current too: this one left it.
        listing.wait_for_function(
            "seq => !document.querySelector(`#sequences tr[data-seq='${seq}']`)",
            arg=seq,
            timeout=60_000,
        )
        assert (
            listing.text_content("#count")
            == "0 sequences, newest first, among the 2000 most recent"  # as a method filter does
        )
        assert listing.evaluate("() => window.stillThisPage") is True

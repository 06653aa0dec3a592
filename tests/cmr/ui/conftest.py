"""Fixtures for `cmr ui` tests: a live repository and, where it is installed, a headless
Chromium driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.requirements import chromium
from tests.support import cmr_server

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass(frozen=True)
class Repository:
    db: Path
    endpoint: str


@pytest.fixture(name="repository")
def fixture_repository(tmp_path: Path) -> Iterator[Repository]:
    """A real `cmr serve` on a fresh SQLite file, for programs to send to while a test looks."""
    db = tmp_path / "cmr.sqlite"
    with cmr_server(db) as endpoint:
        yield Repository(db, endpoint)


@pytest.fixture(name="browser")
def fixture_browser() -> Iterator[Any]:
    """A headless Chromium (Playwright's sync API); without one the test is skipped, saying why
    (or fails, when INVOSEQ_REQUIRE lists ``browser``)."""
    executable = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(executable), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()

"""Fixtures for `cmr ui` tests: a live repository and, where it is installed, a headless
Chromium driven by Playwright."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import cmr_server

CHROMIUM = "/usr/bin/chromium"
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


def browser_missing() -> str | None:
    """Why the browser test cannot run here, or None when it can."""
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (Debian package 'chromium')"
    if importlib.util.find_spec("playwright") is None:
        return "the Python package 'playwright' is not installed"
    return None


@pytest.fixture(name="browser")
def fixture_browser() -> Iterator[Any]:
    """A headless Chromium (Playwright's sync API); the test is skipped, saying why, without one."""
    reason = browser_missing()
    if reason is not None:
        pytest.skip(f"browser test needs Chromium and Playwright: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()

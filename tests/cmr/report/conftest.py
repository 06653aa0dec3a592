"""Fixtures for the HTML report's tests: a real headless Chromium (Debian's ``chromium``,
driven by Playwright) that may read files and nothing else, and a directory for screenshots.

Without /usr/bin/chromium or the ``playwright`` package the browser tests skip, saying which
is missing (``.ci/chromium.sh`` installs chromium; ``pip install -e '.[test]'`` playwright), or
fail when INVOSEQ_REQUIRE lists ``browser`` (tests/requirements.py).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.requirements import chromium

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

REPO = Path(__file__).resolve().parents[3]
#: How long a page may take to become interactive: generous, this is a loaded 2-core machine.
READY_TIMEOUT_MS = 60_000


@dataclass
class Browser:
    """A browser context whose pages may load files only: every other request is aborted and
    kept in ``blocked``. ``open`` returns a page once its report is interactive."""

    context: Any
    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # uncaught errors of the pages' scripts
    allowed: list[str] = field(default_factory=list)  # URL prefixes a test serves itself

    def may_load(self, url: str) -> bool:
        return url.startswith(("file:", "data:", *self.allowed))

    def open(self, url: str) -> Any:
        page = self.context.new_page()
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.goto(url)
        wait_until(page, "window.invoseqReport && window.invoseqReport.readyAt !== null")
        return page


def wait_until(page: Any, expression: str, timeout_ms: float = READY_TIMEOUT_MS) -> Any:
    """Poll ``expression`` in the page until it is truthy (bounded in time). Playwright's own
    ``wait_for_function`` evaluates strings with eval, which the report's policy forbids."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{expression} still false after {timeout_ms} ms")
        page.wait_for_timeout(20)


@pytest.fixture(name="browser", scope="module")
def fixture_browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    executable = chromium()
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(executable),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1400, "height": 820},
        )
        browser = Browser(context)

        def only_files(route: Any) -> None:
            url = route.request.url
            if browser.may_load(url):
                route.continue_()
            else:
                browser.blocked.append(url)
                route.abort()

        context.route("**/*", only_files)
        context.on("request", _count_other(browser))
        try:
            yield browser
        finally:
            context.close()


def _count_other(browser: Browser) -> Any:
    """Requests the router never sees (a browser's own fetches) still count."""

    def seen(request: Any) -> None:
        url = request.url
        if not browser.may_load(url) and url not in browser.blocked:
            browser.blocked.append(url)

    return seen


@pytest.fixture(name="artifacts", scope="session")
def fixture_artifacts() -> Path:
    """Where screenshots go: $INVOSEQ_ARTIFACTS, else test-artifacts/ at the repository root."""
    path = Path(os.environ.get("INVOSEQ_ARTIFACTS") or REPO / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_screenshot(page: Any, artifacts: Path, name: str) -> Path:
    """A PNG of the page in ``artifacts`` (replacing an older one of that name)."""
    target = artifacts / name
    tmp = target.with_suffix(".tmp.png")
    page.mouse.move(1, 1)  # away from the canvases: no tooltip in the picture
    page.screenshot(path=str(tmp))
    shutil.move(tmp, target)
    return target

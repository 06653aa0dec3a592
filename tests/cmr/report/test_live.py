"""A page given a live URL re-reads a running sequence every 2 s, keeps the selection, and
stops once the sequence is no longer running. The model is served by a small HTTP server on
127.0.0.1 inside the test, the way ``cmr ui`` serves it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from cmr.report import build_model, render_page
from cmr.store import open_store
from invoseq import wire
from tests.cmr.conftest import BatchFactory
from tests.cmr.report.conftest import Browser, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.system]

SEQ = bytes.fromhex("1e" * 16)
MS = 1_000_000


class Served:
    """What the server answers: the page at /, the current model at /model."""

    def __init__(self, page: str, model: dict[str, Any]) -> None:
        self.page = page.encode()
        self.model = msgspec.json.encode(model)
        self.model_requests = 0


def handler(served: Served) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/model":
                served.model_requests += 1
                body, kind = served.model, "application/json"
            else:
                body, kind = served.page, "text/html; charset=utf-8"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(name="models")
def fixture_models(make_batch: BatchFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same sequence while running (a root with one call), then complete (a second call)."""
    methods = {1: "shop.root", 2: "shop.step"}
    first = make_batch(5, 1, {1: [wire.Start(1, 0, 0, 1, 0, SEQ), wire.Start(2, 1, 0, 2, MS, SEQ),
                                  wire.End(2, 2 * MS)]}, methods=methods)  # fmt: skip
    second = make_batch(5, 2, {1: [wire.Start(3, 1, 0, 2, 3 * MS, SEQ), wire.End(3, 4 * MS),
                                   wire.End(1, 5 * MS)]}, methods=methods)  # fmt: skip
    store = open_store(memory=True)
    try:
        store.ingest(first, first.process.clock_offset_ns)
        running = build_model(store.load_sequence(SEQ))
        store.ingest(second, second.process.clock_offset_ns)
        complete = build_model(store.load_sequence(SEQ))
    finally:
        store.close()
    assert (running["summary"]["status"], complete["summary"]["status"]) == ("running", "complete")
    return running, complete


@pytest.fixture(name="server")
def fixture_server(
    browser: Browser, models: tuple[dict[str, Any], dict[str, Any]]
) -> Iterator[tuple[str, Served]]:
    running, _ = models
    served = Served(render_page(running, live_url="/model"), running)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(served))
    thread = threading.Thread(target=server.serve_forever, name="report-test-http")
    thread.start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    browser.allowed.append(origin + "/")
    try:
        yield origin, served
    finally:
        browser.allowed.remove(origin + "/")
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_running_sequence_refreshes_until_it_completes(
    browser: Browser,
    server: tuple[str, Served],
    models: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    origin, served = server
    page = browser.open(origin + "/")
    try:
        assert page.evaluate("window.invoseqReport.status") == "running"
        assert page.get_by_text("live", exact=True).is_visible()
        page.evaluate("window.invoseqReport.selectByName('shop.step')")
        assert page.get_by_test_id("detail-iid").inner_text() == "0000000000000002"
        wait_until(page, "window.invoseqReport.updates > 1")
        assert served.model_requests >= 1  # the running sequence was re-read

        served.model = msgspec.json.encode(models[1])
        wait_until(page, "window.invoseqReport.status === 'complete'")
        assert page.evaluate("window.invoseqReport.barCount") == 3
        assert page.get_by_test_id("detail-iid").inner_text() == "0000000000000002"  # kept
        assert not page.get_by_text("live", exact=True).is_visible()
        asked = served.model_requests
        page.wait_for_timeout(2_500)  # longer than the 2 s interval: a poll would have come
        assert served.model_requests == asked  # no longer running: no longer polled
    finally:
        page.close()
    assert browser.blocked == []
    assert browser.errors == []

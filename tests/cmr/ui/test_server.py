"""`cmr ui` as a user runs it: a real server on a repository filled by a real traced program."""

from __future__ import annotations

import collections
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.cmr.ui.ui_support import READY_PREFIX, UI, filled_repository, running_ui, start_ui, stop
from tests.support import cmr_json, read_line

pytestmark = pytest.mark.system

#: 17 checkouts (so that two sequence ids surely share a first hex digit), one slower browse,
#: and one sequence left open in a daemon thread when the process ends: incomplete.
SHOP = """
import threading
import time
import tracer

@tracer.traced
def checkout(n):
    return charge(n)

@tracer.traced
def charge(n):
    return n * 2

@tracer.traced
def browse():
    time.sleep(0.05)  # work that takes a while, so its duration stands apart
    return render()

@tracer.traced
def render():
    return "page"

@tracer.traced
def stuck(entered, release):
    entered.set()
    release.wait()

for n in range(17):
    checkout(n)
browse()
entered, release = threading.Event(), threading.Event()
threading.Thread(target=stuck, args=(entered, release), daemon=True).start()
assert entered.wait(60)
"""
CHECKOUTS = 17


@pytest.fixture(name="shop_db", scope="module")
def fixture_shop_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return filled_repository(tmp_path_factory.mktemp("shop"), SHOP)


@pytest.fixture(name="shop_ui", scope="module")
def fixture_shop_ui(shop_db: Path) -> Iterator[UI]:
    with running_ui(shop_db) as ui:
        yield ui


@pytest.fixture(name="listed", scope="module")
def fixture_listed(shop_ui: UI) -> list[dict[str, Any]]:
    """Every sequence of the shop, as the UI's JSON lists them, newest first."""
    listed: list[dict[str, Any]] = shop_ui.json("/api/sequences")
    return listed


def seqs(listed: list[dict[str, Any]], root: str | None = None) -> list[str]:
    return [s["seq"] for s in listed if root is None or s["root"] == f"__main__.{root}"]


def test_api_lists_what_cmr_ls_lists(shop_ui: UI, shop_db: Path, listed: list[Any]) -> None:
    assert len(listed) == CHECKOUTS + 2
    assert listed == cmr_json(shop_db, "ls", "--limit", "100")
    assert shop_ui.json("/api/sequences?limit=3") == listed[:3]


def test_list_page_links_every_sequence_and_loads_nothing_from_elsewhere(
    shop_ui: UI, listed: list[dict[str, Any]]
) -> None:
    page = shop_ui.get("/")
    assert page.status == 200
    assert page.content_type == "text/html"
    for summary in listed:
        assert f"href='/seq/{summary['seq']}'" in page.body
        assert f"data-seq='{summary['seq']}' data-status='{summary['status']}'" in page.body
    assert "__main__.checkout" in page.body
    assert "__main__.browse" in page.body
    assert "__main__.stuck" in page.body
    for column in ("Sequence", "Root", "Start", "Duration", "Calls", "Threads", "Processes"):
        assert f">{column}</th>" in page.body
    # every column says what it counts, on hover
    headers = re.findall(r"<th[ >][^>]*>", page.body)
    assert len(headers) == 9
    assert all(re.search(r"title='[^']{10,}'", header) for header in headers)
    assert "http:" not in page.body
    assert "https:" not in page.body
    assert "connect-src 'self'" in page.headers["Content-Security-Policy"]


def test_method_filter_selects_the_sequences_that_called_it(
    shop_ui: UI, listed: list[dict[str, Any]]
) -> None:
    checkouts = seqs(listed, "checkout")
    assert len(checkouts) == CHECKOUTS
    assert seqs(shop_ui.json("/api/sequences?method=charge")) == checkouts
    assert seqs(shop_ui.json("/api/sequences?method=__main__.charge")) == checkouts
    assert seqs(shop_ui.json("/api/sequences?method=__main__.render")) == seqs(listed, "browse")
    assert shop_ui.json("/api/sequences?method=no.such.method") == []
    page = shop_ui.get("/?method=charge")
    assert page.status == 200
    assert page.body.count("<tr data-seq=") == CHECKOUTS
    assert "value='charge'" in page.body  # the form keeps what was asked
    # The method filter alone looks through a window of the most recent; the page says so.
    assert f"{CHECKOUTS} sequences, newest first, among the 2000 most recent" in page.body


def test_duration_filters_split_at_a_threshold(shop_ui: UI, listed: list[dict[str, Any]]) -> None:
    ended = [s for s in listed if s["duration_ns"] is not None]
    (slowest,) = [s for s in ended if s["root"] == "__main__.browse"]
    fastest_others = max(s["duration_ns"] for s in ended if s is not slowest)
    assert slowest["duration_ns"] > fastest_others
    threshold_ms = (slowest["duration_ns"] + fastest_others) / 2 / 1e6
    longer = shop_ui.json(f"/api/sequences?min_ms={threshold_ms}")
    assert seqs(longer) == [slowest["seq"]]
    shorter = shop_ui.json(f"/api/sequences?max_ms={threshold_ms}")
    assert seqs(shorter) == [s["seq"] for s in ended if s is not slowest]
    exact_ms = slowest["duration_ns"] / 1e6
    around = shop_ui.json(f"/api/sequences?min_ms={exact_ms - 0.001}&max_ms={exact_ms + 0.001}")
    assert seqs(around) == [slowest["seq"]]
    page = shop_ui.get(f"/?min_ms={threshold_ms}&status=&method=")  # as the form sends it
    assert page.body.count("<tr data-seq=") == 1


def test_status_filter(shop_ui: UI, listed: list[dict[str, Any]]) -> None:
    incomplete = shop_ui.json("/api/sequences?status=incomplete")
    assert seqs(incomplete) == seqs(listed, "stuck")
    assert incomplete[0]["duration_ns"] is None
    complete = shop_ui.json("/api/sequences?status=complete")
    assert seqs(complete) == [s for s in seqs(listed) if s not in seqs(incomplete)]
    assert shop_ui.json("/api/sequences?status=running") == []
    # A sequence that will never end has no duration: a duration filter leaves it out.
    assert shop_ui.json("/api/sequences?status=incomplete&min_ms=0") == []
    both = shop_ui.json("/api/sequences?status=complete&method=charge&limit=2")
    assert seqs(both) == seqs(listed, "checkout")[:2]


def test_the_filters_of_cmr_ls_select_the_same(
    shop_ui: UI, shop_db: Path, listed: list[dict[str, Any]]
) -> None:
    for query, options in [
        ("root=*.check*", ["--root", "*.check*"]),
        ("sort=duration&limit=3", ["--sort", "duration", "--limit", "3"]),
        ("since=1d&root=__main__.browse", ["--since", "1d", "--root", "__main__.browse"]),
        ("until=1d", ["--until", "1d"]),
        ("host=nowhere", ["--host", "nowhere"]),
    ]:
        assert shop_ui.json(f"/api/sequences?{query}") == cmr_json(shop_db, "ls", *options), query
    assert seqs(shop_ui.json("/api/sequences?root=__main__.brow*")) == seqs(listed, "browse")
    page = shop_ui.get("/?root=shop.*&since=1h&sort=duration")
    assert page.status == 200
    assert "value='shop.*'" in page.body  # the form keeps what was asked
    assert "<option value='duration' selected>" in page.body
    assert ">0 sequences, longest first</p>" in page.body  # the index answered


def test_the_top_page_sums_up_the_roots_as_cmr_top_does(shop_ui: UI, shop_db: Path) -> None:
    assert shop_ui.json("/api/top") == cmr_json(shop_db, "top")
    per_method = shop_ui.json("/api/top?by=method&root=__main__.checkout")
    assert per_method == cmr_json(shop_db, "top", "--by", "method", "--root", "__main__.checkout")
    rows = {row["name"]: row for row in per_method}
    assert (rows["__main__.checkout"]["count"], rows["__main__.charge"]["count"]) == (17, 17)
    page = shop_ui.get("/top?since=1d")
    assert page.status == 200
    assert "<tr data-name='__main__.checkout'>" in page.body
    assert "href='/?root=__main__.checkout&amp;since=1d&amp;sort=duration'" in page.body
    bad = shop_ui.get("/top?by=colour")
    assert (bad.status, "by: expected root or method" in bad.body) == (400, True)
    twice = shop_ui.get("/top?root=a&root=b")  # as the list page: a parameter given once
    assert (twice.status, "root: give it once" in twice.body) == (400, True)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("min_ms=abc", "min_ms: expected milliseconds or a number and a unit"),
        ("max_ms=-1", "max_ms: expected 0 or more milliseconds"),
        ("max_ms=nan", "max_ms: expected 0 or more milliseconds"),
        ("min_ms=1e300", "min_ms: expected at most 292 years"),  # once reached SQLite: a 500
        ("max_ms=" + "9" * 400, "max_ms: expected 0 or more milliseconds"),
        ("min_ms=250us&max_ms=1.5s", None),  # the command line's units
        ("min_ms=5&max_ms=1", "min_ms is more than max_ms"),
        ("status=finished", "status: expected one of running, complete, incomplete, error"),
        ("sort=random", "sort: expected one of start, duration"),
        ("since=yesterday", "since: expected an age"),
        ("limit=0", "limit: expected 1 to 1000"),
        ("limit=ten", "limit: expected a whole number"),
        ("colour=red", "unknown parameter 'colour'"),
        ("status=running&status=complete", "status: give it once"),
    ],
)
def test_bad_query_values_are_400_with_a_short_message(
    shop_ui: UI, query: str, message: str | None
) -> None:
    reply = shop_ui.get(f"/api/sequences?{query}")
    if message is None:  # a good one, beside the bad ones it looks like
        assert reply.status == 200
        return
    assert reply.status == 400
    assert reply.content_type == "text/plain"
    assert message in reply.body
    assert len(reply.body.strip().splitlines()) == 1
    page = shop_ui.get(f"/?{query}")
    assert page.status == 400
    assert page.content_type == "text/html"
    assert "class='error'" in page.body
    assert "Traceback" not in page.body


def test_unknown_and_ambiguous_sequences_are_404(shop_ui: UI, listed: list[dict[str, Any]]) -> None:
    by_digit = collections.Counter(s[0] for s in seqs(listed))
    shared = next(digit for digit, count in by_digit.items() if count > 1)  # 19 ids, 16 digits
    unused = next((d for d in "0123456789abcdef" if d not in by_digit), None)
    cases = {
        f"/seq/{shared}": "give more digits",
        f"/api/seq/{shared}/model": "give more digits",
        "/seq/xyz": "is not a sequence id",
        "/api/seq/xyz/model": "is not a sequence id",
        "/api/seq/" + "0" * 33 + "/model": "is not a sequence id",
        "/nowhere": "no page /nowhere",
        "/api/seq/abc": "no page",
        "/seq/": "no page",
    }
    if unused is not None:
        cases[f"/seq/{unused}"] = f"no sequence matches '{unused}'"
    for path, message in cases.items():
        reply = shop_ui.get(path)
        assert (reply.status, reply.content_type) == (404, "text/plain"), path
        assert message in reply.body, (path, reply.body)
        assert len(reply.body.strip().splitlines()) == 1


def test_sequence_model_and_view(shop_ui: UI, listed: list[dict[str, Any]]) -> None:
    checkout = seqs(listed, "checkout")[0]
    model = shop_ui.json(f"/api/seq/{checkout[:12]}/model")
    assert model["summary"]["seq"] == checkout
    assert model["summary"]["status"] == "complete"
    assert model["summary"]["invocations"] == 2
    (stuck,) = seqs(listed, "stuck")
    assert shop_ui.json(f"/api/seq/{stuck}/model")["summary"]["status"] == "incomplete"
    page = shop_ui.get(f"/seq/{checkout[:12]}")
    assert (page.status, page.content_type) == (200, "text/html")
    assert checkout in page.body  # the full id, whatever prefix was given
    assert "/api/seq/" not in page.body  # an ended sequence has nothing to poll for
    assert "__main__.charge" in page.body


def test_loopback_names_are_served_and_foreign_host_headers_refused(shop_ui: UI) -> None:
    port = urlsplit(shop_ui.url).port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        assert shop_ui.get("/", headers={"Host": host}).status == 200, host
    # A page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) gets nothing.
    refused = shop_ui.get("/api/sequences", headers={"Host": f"attacker.example:{port}"})
    assert refused.status == 403
    assert "unexpected Host header" in refused.body


def test_listens_on_127_0_0_1_only(shop_ui: UI) -> None:
    port = urlsplit(shop_ui.url).port
    assert port is not None
    assert urlsplit(shop_ui.url).hostname == "127.0.0.1"
    with socket.create_connection(("127.0.0.1", port), timeout=30):
        pass
    # 127.0.0.2 reaches this machine too: a server bound to every address would answer there.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=30).close()


def test_other_methods_are_refused_in_one_line(shop_ui: UI) -> None:
    request = urllib.request.Request(shop_ui.url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    with caught.value as error:
        assert error.code == 501
        assert len(error.read().decode().strip().splitlines()) == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.timing
def test_a_signal_stops_it_promptly_even_with_a_client_connected(
    shop_db: Path, sig: signal.Signals
) -> None:
    process = start_ui(shop_db, "--port", "0")
    try:
        line = read_line(process, 60)
        assert line.startswith(READY_PREFIX)
        address = urlsplit(line[len(READY_PREFIX) :].strip())
        assert address.port is not None
        # A client that connected and never sent its request holds a request thread.
        with socket.create_connection(("127.0.0.1", address.port), timeout=30):
            started = time.monotonic()
            process.send_signal(sig)
            assert process.wait(30) == 0
            assert time.monotonic() - started < 10  # generous: it does not wait for the client
        assert process.stderr is not None
        assert process.stderr.read() == ""
    finally:
        stop(process)


def test_missing_repository_is_a_one_line_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cmr", "ui", "--port", "0", "--db", str(tmp_path / "none.sqlite")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("cmr: no repository at ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none.sqlite").exists()  # reading never creates one


def test_port_in_use_is_a_one_line_error(shop_db: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "cmr", "ui", "--port", str(port), "--db", str(shop_db)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr == (
        f"cmr: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(choose another --port, or 0 for any free one)\n"
    )


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_bad_port_is_a_usage_error(shop_db: Path, port: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cmr", "ui", "--port", port, "--db", str(shop_db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--port" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_global_db_option_is_honoured(shop_db: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "cmr", "--db", str(shop_db), "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(process, 60)
        assert line.startswith(READY_PREFIX)
        ui = UI(line[len(READY_PREFIX) :].strip(), process)
        assert len(ui.json("/api/sequences")) == CHECKOUTS + 2
        assert str(shop_db) in ui.get("/").body
    finally:
        stop(process)

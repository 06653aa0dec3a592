"""`cmr forward`: sequences pushed to a real OTLP/HTTP receiver, and clear failures when there
is none or it refuses them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cmr.cli import main
from cmr.store import open_store
from invoseq import wire
from tests.cmr.conftest import CLOCK_OFFSET_NS, make_batch
from tests.cmr.export_support import MS, SEQ, fill
from tests.cmr.otlp_support import otlp_receiver
from tests.support import free_port

DAY_NS = 86_400 * 1_000_000_000
#: A second sequence, ten days after the first (2023-11-14T22:13:20Z).
LATER = bytes.fromhex("1a7e0000000000000000000000000002")
SPANS_OF_SEQ = 10  # export_support's sequence, its samples merged in as estimated calls


@pytest.fixture(name="repo")
def fixture_repo(tmp_path) -> str:
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        fill(store)
        events = [wire.Start(1, 0, 0, 1, 0, LATER), wire.End(1, 1 * MS)]
        later = make_batch(0x61, 1, {1: events}, clock_offset_ns=CLOCK_OFFSET_NS + 10 * DAY_NS)
        assert store.ingest(later, CLOCK_OFFSET_NS + 10 * DAY_NS + 2 * MS)
    finally:
        store.close()
    return path


def forward(capsys, repo: str, *argv: str) -> tuple[int, str, str]:
    code = main(["--db", repo, "forward", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, repo: str, *argv: str, code: int = 1) -> str:
    returned, out, err = forward(capsys, repo, *argv)
    assert (returned, out) == (code, "")
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.system
def test_forward_sends_every_span_of_the_sequence_in_batches(repo, capsys) -> None:
    with otlp_receiver() as receiver:
        code, out, err = forward(
            capsys, repo, SEQ.hex()[:6], "--otlp-endpoint", receiver.url, "--batch-size", "4"
        )
        received = receiver.spans()
        paths = list(receiver.paths)
    assert (code, err) == (0, "")
    assert out == (
        f"forwarded 1 sequence ({SPANS_OF_SEQ} spans) to {receiver.url}/v1/traces in 3 requests\n"
    )
    assert paths == ["/v1/traces"] * 3
    assert len(received) == SPANS_OF_SEQ
    assert {span.trace_id for _, span in received} == {SEQ}
    assert len({span.span_id for _, span in received}) == SPANS_OF_SEQ
    names = {span.name for _, span in received}
    assert {"shop.checkout", "shop.charge", "stock.reserve", "stock.lock", "send"} <= names


@pytest.mark.system
def test_forward_all_sends_oldest_first_and_since_only_the_recent(repo, capsys) -> None:
    with otlp_receiver() as receiver:
        code, out, _ = forward(capsys, repo, "--all", "--otlp-endpoint", receiver.url)
        everything = [span.trace_id for _, span in receiver.spans()]
    assert code == 0
    assert out.startswith(f"forwarded 2 sequences ({SPANS_OF_SEQ + 1} spans)")
    assert everything == [SEQ] * SPANS_OF_SEQ + [LATER]

    with otlp_receiver() as receiver:
        code, out, _ = forward(
            capsys, repo, "--since", "2023-11-20T00:00+00:00", "--otlp-endpoint", receiver.url
        )
        recent = [span.trace_id for _, span in receiver.spans()]
    assert code == 0
    assert recent == [LATER]


@pytest.mark.system
def test_nothing_to_forward_is_said_and_sends_nothing(repo, capsys) -> None:
    with otlp_receiver() as receiver:
        code, out, err = forward(capsys, repo, "--since", "1h", "--otlp-endpoint", receiver.url)
        paths = list(receiver.paths)
    assert (code, out, err) == (0, "nothing to forward: no sequence started since then\n", "")
    assert paths == []


@pytest.mark.system
def test_an_endpoint_given_with_its_path_is_used_as_it_is(repo, capsys) -> None:
    with otlp_receiver() as receiver:
        code, _, _ = forward(
            capsys, repo, SEQ.hex(), "--otlp-endpoint", receiver.url + "/otlp/v1/traces"
        )
        paths = list(receiver.paths)
    assert code == 0
    assert paths == ["/otlp/v1/traces"]


@pytest.mark.system
def test_headers_go_with_every_request(repo, capsys) -> None:
    with otlp_receiver() as receiver:
        code, _, _ = forward(
            capsys,
            repo,
            "--all",
            "--otlp-endpoint",
            receiver.url,
            "--header",
            "Authorization=Bearer s3cret",
            "--batch-size",
            "6",
        )
        headers = list(receiver.headers)
    assert code == 0
    assert len(headers) == 2
    assert all(request["authorization"] == "Bearer s3cret" for request in headers)


@pytest.mark.system
def test_a_receiver_that_refuses_the_spans_is_a_one_line_error(repo, capsys) -> None:
    with otlp_receiver() as receiver:
        receiver.status = 400
        message = one_line_error(capsys, repo, SEQ.hex(), "--otlp-endpoint", receiver.url)
    assert message == f"cmr: {receiver.url}/v1/traces did not take the spans: HTTP 400 Bad Request"


@pytest.mark.system
@pytest.mark.timing
def test_an_unreachable_endpoint_exits_1_at_once_with_the_reason(repo) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "cmr", "--db", repo, "forward", "--all", "--otlp-endpoint", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"cmr: cannot reach {url}/v1/traces: Connection refused\n"
    assert elapsed < 30, "no retrying until the exporter's timeout"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--otlp-endpoint", "http://127.0.0.1:4318"], "give sequence ids, --since WHEN or --all"),
        (
            [SEQ.hex(), "--all", "--otlp-endpoint", "http://127.0.0.1:4318"],
            "give sequence ids, --since WHEN or --all",
        ),
        (["--all", "--otlp-endpoint", "collector:4318"], "expected an http:// or https:// URL"),
        (["--all", "--otlp-endpoint", "http://host:port"], "bad port"),
        (["ffff", "--otlp-endpoint", "http://127.0.0.1:4318"], "ffff"),
    ],
)
def test_forward_mistakes_are_one_line_and_exit_1(repo, capsys, argv, message) -> None:
    assert message in one_line_error(capsys, repo, *argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--all"],
        ["--all", "--otlp-endpoint", "http://x", "--batch-size", "0"],
        ["--all", "--otlp-endpoint", "http://x", "--timeout", "0"],
        ["--all", "--otlp-endpoint", "http://x", "--header", "no-equals-sign"],
    ],
)
def test_bad_options_are_one_line_usage_errors(repo, capsys, argv) -> None:
    one_line_error(capsys, repo, *argv, code=2)


def test_forward_of_a_missing_repository_creates_nothing(tmp_path, capsys) -> None:
    missing = tmp_path / "none.sqlite"
    message = one_line_error(
        capsys, str(missing), "--all", "--otlp-endpoint", "http://127.0.0.1:4318"
    )
    assert "no repository" in message
    assert not Path(missing).exists()

"""`cmr ls`'s query options on a repository whose sequences the test wrote: what each option
selects, the order, and one-line errors for options that cannot match."""

from __future__ import annotations

import json

import pytest

from cmr.store import open_store
from invoseq import wire
from tests.cmr.cli_helpers import one_line_error, run
from tests.cmr.store.records import seq_id, start

MS = 1_000_000
FAST, SLOW, FAILED = seq_id("fa"), seq_id("51"), seq_id("e0")


@pytest.fixture(name="repo")
def fixture_repo(tmp_path, make_batch) -> str:
    """shop.checkout taking 20 ms, then 900 ms, then shop.pay raising after 5 ms."""
    events = [
        start(1, 0, FAST),
        wire.End(1, 20 * MS),
        start(2, 1_000 * MS, SLOW),
        wire.End(2, 1_900 * MS),
        start(3, 2_000 * MS, FAILED, method=2),
        wire.Error(3, 2_005 * MS, "TimeoutError"),
    ]
    path = str(tmp_path / "cmr.sqlite")
    store = open_store(path)
    try:
        store.ingest(make_batch(7, 1, {1: events}, methods={1: "shop.checkout", 2: "shop.pay"}), 0)
    finally:
        store.close()
    return path


def listed(capsys, repo: str, *options: str) -> list[str]:
    code, out, err = run(capsys, "--db", repo, "ls", "--json", *options)
    assert (code, err) == (0, "")
    return [line["seq"] for line in json.loads(out)]


def test_each_option_selects_what_it_says(repo, capsys):
    assert listed(capsys, repo) == [FAILED.hex(), SLOW.hex(), FAST.hex()]
    assert listed(capsys, repo, "--root", "shop.check*") == [SLOW.hex(), FAST.hex()]
    assert listed(capsys, repo, "--min-duration", "100") == [SLOW.hex()]
    assert listed(capsys, repo, "--max-duration", "19.5") == [FAILED.hex()]
    # A number alone is milliseconds; with a unit, that unit.
    assert listed(capsys, repo, "--min-duration", "0.1s") == [SLOW.hex()]
    assert listed(capsys, repo, "--min-duration", "100000us") == [SLOW.hex()]
    assert listed(capsys, repo, "--max-duration", "19.5ms") == [FAILED.hex()]
    assert listed(capsys, repo, "--status", "error") == [FAILED.hex()]
    assert listed(capsys, repo, "--status", "complete") == [SLOW.hex(), FAST.hex()]
    assert listed(capsys, repo, "--host", "testhost", "--limit", "1") == [FAILED.hex()]
    assert listed(capsys, repo, "--host", "elsewhere") == []
    assert listed(capsys, repo, "--sort", "duration") == [SLOW.hex(), FAST.hex(), FAILED.hex()]
    # The sequences started at the test clock's epoch, long ago.
    assert listed(capsys, repo, "--since", "1h") == []
    assert listed(capsys, repo, "--until", "1h") == [FAILED.hex(), SLOW.hex(), FAST.hex()]


def test_the_table_marks_a_root_that_raised_and_says_when_nothing_matches(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "ls", "--status", "error")
    assert code == 0
    header, line = out.splitlines()
    assert header.split()[3] == "STATUS"
    assert line.split()[5:7] == ["error", "1"]  # seq, date, time, duration (2 words), status
    assert line.split()[-1] == "shop.pay"

    assert run(capsys, "--db", repo, "ls", "--root", "nothing.*")[1] == "no sequence matches\n"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--min-duration", "5", "--max-duration", "1"], "--min-duration is above --max-duration"),
        (["--since", "1h", "--until", "2h"], "--since is after --until"),
    ],
)
def test_options_that_cannot_match_are_one_line_errors(repo, capsys, options, message):
    code, _, err = run(capsys, "--db", repo, "ls", *options)

    assert code == 1
    assert message in one_line_error(err)


def test_service_sequences_are_listed_when_asked_and_named_when_they_are_all_there_is(
    tmp_path, make_batch, capsys
):
    lifespan = seq_id("5e")
    path = str(tmp_path / "services.sqlite")
    store = open_store(path)
    try:
        events = [start(1, 0, lifespan, method=1)]  # a server started, no request served
        methods = {1: "invoseq.service.asgi.lifespan"}
        store.ingest(make_batch(7, 1, {1: events}, methods=methods), 0)
    finally:
        store.close()
    assert run(capsys, "--db", path, "ls")[1] == (
        "no requests yet; service sequences only: cmr ls --kind service\n"
    )
    assert listed(capsys, path, "--kind", "service") == [lifespan.hex()]
    assert listed(capsys, path, "--kind", "all") == [lifespan.hex()]
    assert listed(capsys, path) == []
    assert run(capsys, "--db", path, "ls", "--kind", "service", "--status", "complete")[1] == (
        "no sequence matches\n"
    )

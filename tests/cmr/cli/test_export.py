"""`cmr export`: files that speedscope, Perfetto / chrome://tracing and flamegraph tools open."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from cmr.cli import main
from cmr.exports import sequence_tree
from cmr.store import open_store
from cmr.views.model import KIND_SYNTHETIC, walk
from tests.cmr.export_support import MS, SEQ, filled

SCHEMA = Path(__file__).resolve().parents[2] / "data" / "speedscope-schema.json"


@pytest.fixture(name="repo")
def fixture_repo(tmp_path) -> str:
    return filled(str(tmp_path / "repo.sqlite"))


@pytest.fixture(name="unsampled_repo")
def fixture_unsampled_repo(tmp_path) -> str:
    return filled(str(tmp_path / "unsampled.sqlite"), samples=False)


def export(capsys, repo: str, *argv: str) -> str:
    code = main(["--db", repo, "export", SEQ.hex()[:8], *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def one_line_error(capsys, argv: list[str], code: int = 1) -> str:
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def tree_of(repo: str):
    store = open_store(repo, readonly=True)
    try:
        return sequence_tree(store.load_sequence(SEQ))
    finally:
        store.close()


# -- speedscope -----------------------------------------------------------------------------


def test_speedscope_export_follows_the_published_schema(repo, capsys):
    document = json.loads(export(capsys, repo, "--format", "speedscope"))

    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    assert document["name"] == f"invoseq sequence {SEQ.hex()}"
    assert document["activeProfileIndex"] == 0


def test_speedscope_has_an_evented_profile_per_thread_that_speedscope_can_replay(repo, capsys):
    """What speedscope's importer demands beyond the schema: frames that exist, events whose
    times never go back, and every close matching the innermost open frame."""
    document = json.loads(export(capsys, repo, "--format", "speedscope"))
    frames = document["shared"]["frames"]
    evented = [p for p in document["profiles"] if p["type"] == "evented"]

    assert [p["name"] for p in evented] == [
        "web-1:4242 thread-1 (1)",
        "web-1:4242 thread-2 (2)",
        "db-1:4242 thread-1 (1)",
    ]
    opened: list[str] = []
    for profile in evented:
        assert profile["unit"] == "nanoseconds"
        assert (profile["startValue"], profile["endValue"]) == (0, 20 * MS)
        stack: list[int] = []
        last = 0
        for event in profile["events"]:
            assert 0 <= event["frame"] < len(frames)
            assert last <= event["at"] <= profile["endValue"]
            last = event["at"]
            if event["type"] == "O":
                stack.append(event["frame"])
                opened.append(frames[event["frame"]]["name"])
            else:
                assert stack.pop() == event["frame"]
        assert stack == []
    tree = tree_of(repo)
    assert sorted(opened) == sorted(
        node.name for node, _ in walk(tree.root) if node.kind != KIND_SYNTHETIC
    )


def test_speedscope_shows_a_call_that_never_ended_until_its_caller_ended(repo, capsys):
    document = json.loads(export(capsys, repo, "--format", "speedscope"))
    frames = [frame["name"] for frame in document["shared"]["frames"]]
    db = next(p for p in document["profiles"] if p["name"] == "db-1:4242 thread-1 (1)")

    events = [(e["type"], frames[e["frame"]], e["at"]) for e in db["events"]]
    assert events == [
        ("O", "stock.reserve", 6 * MS),
        ("O", "stock.lock", 7 * MS),
        ("C", "stock.lock", 15 * MS),
        ("C", "stock.reserve", 15 * MS),
    ]


def test_speedscope_estimated_calls_carry_their_code_location(repo, capsys):
    document = json.loads(export(capsys, repo, "--format", "speedscope"))

    assert {"name": "send", "file": "/src/http.py", "line": 40} in document["shared"]["frames"]


def test_speedscope_has_a_sampled_profile_per_sampled_thread_weighted_by_time(repo, capsys):
    document = json.loads(export(capsys, repo, "--format", "speedscope"))
    frames = [frame["name"] for frame in document["shared"]["frames"]]
    sampled = {p["name"]: p for p in document["profiles"] if p["type"] == "sampled"}

    assert set(sampled) == {
        "samples · web-1:4242 thread-1 (1)",
        "samples · web-1:4242 thread-2 (2)",
    }
    pool = sampled["samples · web-1:4242 thread-2 (2)"]
    assert [[frames[i] for i in stack] for stack in pool["samples"]] == [
        ["Thread.run", "gateway", "send"],
        ["Thread.run", "gateway", "send"],
        ["Thread.run", "gateway", "dumps"],
    ]
    assert pool["weights"] == [2 * MS, 2 * MS, 1 * MS]
    assert (pool["unit"], pool["startValue"], pool["endValue"]) == ("nanoseconds", 0, 5 * MS)


def test_speedscope_without_samples_has_only_evented_profiles(unsampled_repo, capsys):
    document = json.loads(export(capsys, unsampled_repo, "--format", "speedscope"))

    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    assert {p["type"] for p in document["profiles"]} == {"evented"}


# -- chrome ---------------------------------------------------------------------------------


def chrome(capsys, repo: str) -> dict[str, Any]:
    return json.loads(export(capsys, repo, "--format", "chrome"))


def test_chrome_trace_events_have_the_fields_viewers_require(repo, capsys):
    document = chrome(capsys, repo)

    assert document["displayTimeUnit"] == "ms"
    assert document["otherData"]["seq"] == SEQ.hex()
    events = document["traceEvents"]
    for event in events:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(event), event
        assert isinstance(event["ts"], int | float)
        if event["ph"] == "X":
            assert event["dur"] >= 0
    tree = tree_of(repo)
    slices = [e for e in events if e["ph"] == "X"]
    assert sorted(e["name"] for e in slices) == sorted(
        node.name for node, _ in walk(tree.root) if node.kind != KIND_SYNTHETIC
    )
    assert {e["cat"] for e in slices} == {"measured", "estimated"}
    assert {e["name"] for e in slices if e["cat"] == "estimated"} == {"rate", "send", "dumps"}


def test_chrome_names_every_process_and_thread_track(repo, capsys):
    events = chrome(capsys, repo)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"
    }

    # Both processes have OS pid 4242 (two hosts): each still gets a process track of its own.
    assert sorted(processes.values()) == ["db-1:4242", "web-1:4242"]
    assert len(processes) == 2
    web = next(pid for pid, name in processes.items() if name == "web-1:4242")
    assert web == 4242
    assert threads[(web, 1)] == "thread-1 (1)"
    assert threads[(web, 2)] == "thread-2 (2)"
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] in {"X", "i", "s", "f"}}
    assert used <= set(threads)


def test_chrome_slices_nest_on_every_thread_track(repo, capsys):
    events = chrome(capsys, repo)["traceEvents"]
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for event in events:
        if event["ph"] == "X":
            tracks.setdefault((event["pid"], event["tid"]), []).append(event)

    for slices in tracks.values():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends: list[float] = []
        for piece in slices:
            while open_ends and open_ends[-1] <= piece["ts"]:
                open_ends.pop()
            end = piece["ts"] + piece["dur"]
            assert not open_ends or end <= open_ends[-1], piece
            open_ends.append(end)


def test_chrome_draws_an_arrow_per_hand_off(repo, capsys):
    events = chrome(capsys, repo)["traceEvents"]
    flows: dict[int, dict[str, dict[str, Any]]] = {}
    for event in events:
        if event["ph"] in {"s", "f"}:
            assert event["ph"] not in flows.setdefault(event["id"], {})
            flows[event["id"]][event["ph"]] = event

    assert len(flows) == 2
    for pair in flows.values():
        assert set(pair) == {"s", "f"}
        assert pair["f"]["bp"] == "e"
        assert (pair["s"]["name"], pair["s"]["cat"]) == (pair["f"]["name"], pair["f"]["cat"])
    where = {e["name"]: (e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
    arrows = sorted(
        (p["s"]["ts"], (p["s"]["pid"], p["s"]["tid"]), p["f"]["ts"], (p["f"]["pid"], p["f"]["tid"]))
        for p in flows.values()
    )
    # From shop.checkout when it submitted, to the start of the call that ran the work.
    assert arrows == [
        (4_000, where["shop.checkout"], 4_500, where["shop.charge"]),
        (5_000, where["shop.checkout"], 6_000, where["stock.reserve"]),
    ]
    assert where["shop.charge"] != where["shop.checkout"] != where["stock.reserve"]


def test_chrome_marks_the_call_that_raised(repo, capsys):
    events = chrome(capsys, repo)["traceEvents"]
    errors = [e for e in events if e.get("cat") == "error"]

    assert [(e["name"], e["ph"], e["s"], e["ts"]) for e in errors] == [
        ("raised ValueError", "i", "t", 7_000)
    ]
    audit = next(e for e in events if e["name"] == "shop.audit")
    assert audit["args"]["status"] == "error"
    assert audit["args"]["error"] == "ValueError"


# -- folded ---------------------------------------------------------------------------------


def parse_folded(text: str) -> dict[str, int]:
    """As flamegraph.pl reads a line: the stack, a space, the count."""
    stacks: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        assert stack not in stacks
        stacks[stack] = int(count)
    return stacks


def test_folded_weighs_stacks_by_samples_when_the_sequence_has_them(repo, capsys):
    stacks = parse_folded(export(capsys, repo, "--format", "folded"))

    assert stacks == {
        "shop.checkout;shop.charge;shop.gateway;send": 2,
        "shop.checkout;shop.charge;shop.gateway;dumps": 1,
        "shop.checkout;shop.price;rate": 1,
    }
    assert sum(stacks.values()) == tree_of(repo).root.samples


def test_folded_weighs_stacks_by_self_time_in_microseconds_without_samples(unsampled_repo, capsys):
    stacks = parse_folded(export(capsys, unsampled_repo, "--format", "folded"))

    # checkout: 20 ms minus what its children cover (1-3, 4.5-15 ms); stock.lock never ended.
    assert stacks == {
        "shop.checkout": 7_500,
        "shop.checkout;shop.price": 2_000,
        "shop.checkout;shop.charge": 1_500,
        "shop.checkout;shop.charge;shop.gateway": 6_000,
        "shop.checkout;stock.reserve": 1_000,
        "shop.checkout;shop.audit": 1_000,
    }


def test_folded_can_weigh_a_sampled_sequence_by_time(repo, capsys):
    stacks = parse_folded(export(capsys, repo, "--format", "folded", "--weight", "time"))

    # Estimated calls take their time out of the self time of the measured call above them.
    assert stacks == {
        "shop.checkout": 7_500,
        "shop.checkout;shop.price": 1_000,
        "shop.checkout;shop.price;rate": 1_000,
        "shop.checkout;shop.charge": 1_500,
        "shop.checkout;shop.charge;shop.gateway": 1_000,
        "shop.checkout;shop.charge;shop.gateway;send": 4_000,
        "shop.checkout;shop.charge;shop.gateway;dumps": 1_000,
        "shop.checkout;stock.reserve": 1_000,
        "shop.checkout;shop.audit": 1_000,
    }


def test_folded_samples_of_a_sequence_without_samples_is_an_error(unsampled_repo, capsys):
    argv = ["--db", unsampled_repo, "export", SEQ.hex(), "--format", "folded"]
    line = one_line_error(capsys, [*argv, "--weight", "samples"])

    assert "has no samples" in line
    assert "--weight time" in line


# -- the command ----------------------------------------------------------------------------


def test_export_writes_the_file_and_says_what_opens_it(repo, capsys, tmp_path):
    target = tmp_path / "seq.trace.json"
    code = main(["--db", repo, "export", SEQ.hex(), "--format", "chrome", "-o", str(target)])

    out, err = capsys.readouterr()
    assert code == 0
    assert out == ""
    assert "perfetto" in err
    assert json.loads(target.read_text())["traceEvents"]


def test_export_to_dash_is_standard_output(repo, capsys):
    assert parse_folded(export(capsys, repo, "--format", "folded", "-o", "-"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "ffff", "--format", "chrome"], "no sequence matches 'ffff'"),
        (["export", "xyz", "--format", "chrome"], "is not a sequence id"),
        (
            ["export", SEQ.hex(), "--format", "chrome", "--weight", "time"],
            "--weight applies to --format folded only",
        ),
        (["export", SEQ.hex(), "--format", "bundle"], "a bundle is binary: give -o FILE"),
        (
            ["export", SEQ.hex(), "--format", "chrome", "-o", "/nonexistent/dir/t.json"],
            "cannot write /nonexistent/dir/t.json",
        ),
    ],
)
def test_export_mistakes_are_one_line_and_exit_1(repo, capsys, argv, message):
    assert message in one_line_error(capsys, ["--db", repo, *argv])


@pytest.mark.parametrize(
    "argv",
    [
        ["export", SEQ.hex(), "--format", "html"],
        ["export", SEQ.hex()],
        ["export", SEQ.hex(), "--format", "folded", "--weight", "bytes"],
    ],
)
def test_a_bad_format_or_weight_is_a_one_line_usage_error(repo, capsys, argv):
    line = one_line_error(capsys, ["--db", repo, *argv], code=2)

    assert line.startswith("cmr export: error:")


def test_export_of_a_missing_repository_creates_nothing(tmp_path, capsys):
    db = tmp_path / "absent.sqlite"

    assert "no repository" in one_line_error(
        capsys, ["--db", str(db), "export", "ab", "--format", "chrome"]
    )
    assert not db.exists()


@pytest.mark.parametrize("command", ["export", "import"])
def test_export_and_import_explain_themselves(capsys, command):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out

    assert out.startswith(f"usage: cmr {command}")
    assert "examples:" in out
    if command == "export":
        for fmt in ("speedscope", "chrome", "folded", "bundle"):
            assert f"--format {fmt}" in out

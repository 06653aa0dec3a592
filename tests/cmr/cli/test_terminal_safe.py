"""Text a sender wrote reaches a terminal escaped: every text output of ``cmr`` (and the report
``tracer run`` prints at exit) shows the control characters of names, thread names, hosts,
errors, attributes, log records, hand-off kinds, files and frames as ``\\x1b``, ``\\r``, …, so
no sender can set the window title, clear the screen, forge a line or reorder text; printable
Unicode stays as it is, and JSON keeps every string exact."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cmr.store import open_store
from cmr.views.render.tables import fixed_line, sequence_cells
from cmr.views.render.terms import printable
from invoseq import wire
from tests.cmr.cli_helpers import run
from tests.cmr.conftest import BatchFactory
from tracer.run.summary import ReportOptions, render_report

MS = 1_000_000
SEQ = bytes.fromhex("e5" * 16)
OTHER = bytes.fromhex("e6" * 16)
HID = 0x5EED
#: What a hostile sender writes: set the window title, clear the screen, forge a line, CSI in
#: its 8-bit form, DEL, and a right-to-left override.
TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
FORGED = "\r\nSEQ  forged"
CSI = "\x9b31m"
RLO = "\u202eevil"
HOSTILE = (TITLE, CLEAR, FORGED, CSI, "\x7f", RLO)
#: What a terminal acts on, none of which a text output may print raw (its own lines aside).
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def hostile(tag: str) -> str:
    return tag + "".join(HOSTILE)


@pytest.fixture(name="repo")
def fixture_repo(tmp_path: Path, make_batch: BatchFactory, clock_offset_ns: int) -> str:
    """Two runs of a sequence whose every string came from a hostile sender: names (module
    and qualname), thread names, host, argv, the error, attributes, a log record, a link, a
    hand-off kind, and sampled frames (file and function)."""
    module = "shop" + TITLE
    names = {1: f"{module}.checkout{CLEAR}", 2: f"{module}.pay{FORGED}", 3: "shop.café中文"}
    batches = []
    for batch_no, seq in enumerate((SEQ, OTHER)):
        events = {
            1: [
                wire.Start(1, 0, 0, 1, 0, seq),
                wire.Attrs(
                    1,
                    {
                        hostile("key"): hostile("value"),
                        "log.0": "WARNING " + hostile("app.pricing: stock"),
                        "link.seq": hostile("e5e5"),
                        "link.iid": hostile("7"),
                        "link.kind": hostile("celery"),
                    },
                ),
                wire.Start(2, 1, 0, 2, 1 * MS, seq),
                wire.Error(2, 4 * MS, hostile("Declined")),
                wire.Handoff(HID, 1, "th\x1b[2J", 3, 5 * MS, seq),
                wire.End(1, (20 + batch_no) * MS),
            ],
            2: [wire.Start(3, 1, HID, 3, 6 * MS, seq), wire.End(3, 9 * MS)],
        }
        batch = make_batch(
            0x1111,
            batch_no,
            events,
            methods=names,
            host=hostile("host"),
            argv=[hostile("app.py")],
            frames=[
                wire.FrameInfo(1, f"/src/{module}.py", f"checkout{CLEAR}", 11),
                wire.FrameInfo(2, hostile("/srv/db") + ".py", hostile("lookup"), 40),
            ],
            samples=[wire.Sample(1, 10 * MS, 1, 5 * MS, 5 * MS, [1, 2], [15, 41])],
            sampler=wire.SamplerReport("wall", 5, 40, 2, 3 * MS, 6 * MS, 8 * MS),
        )
        threads = [wire.ThreadInfo(tid, 1000 + tid, hostile(f"thread-{tid}")) for tid in (1, 2)]
        batches.append(wire.Batch(**{**_fields(batch), "threads": threads}))
    path = str(tmp_path / "repo.sqlite")
    store = open_store(path)
    try:
        for batch in batches:
            assert store.ingest(batch, clock_offset_ns)
    finally:
        store.close()
    return path


def _fields(batch: wire.Batch) -> dict[str, object]:
    return {name: getattr(batch, name) for name in batch.__struct_fields__}


def assert_terminal_safe(text: str) -> None:
    found = RAW.search(text)
    assert found is None, f"raw {found.group()!r} at {found.start()}: {text[:2000]!r}"


PREFIX = SEQ.hex()[:12]
TEXT_COMMANDS = [
    ["ls"],
    ["show", PREFIX],
    ["show", PREFIX, "--threads"],
    ["show", PREFIX, "--samples"],
    ["show", PREFIX, "--critical-path"],
    ["show", PREFIX, "--all"],
    ["show", PREFIX, "--max-nodes", "2"],
    ["profile", PREFIX],
    ["profile", PREFIX, "--by-thread", "--lines"],
    ["profile", "--method", f"shop{TITLE}.checkout{CLEAR}"],
    ["diff", PREFIX, OTHER.hex()[:12]],
    ["top"],
    ["top", "--by", "method"],
    ["stats"],
]


@pytest.mark.parametrize("argv", TEXT_COMMANDS, ids=" ".join)
def test_every_text_output_escapes_what_a_sender_wrote(repo: str, capsys, argv) -> None:
    code, out, err = run(capsys, *argv, "--db", repo)
    assert code == 0, err
    assert_terminal_safe(out)
    assert_terminal_safe(err)


def test_the_tree_shows_each_hostile_string_escaped_once(repo: str, capsys) -> None:
    _, out, _ = run(capsys, "show", PREFIX, "--all", "--db", repo)
    for text in (
        f"shop{TITLE}.checkout{CLEAR}",  # a name
        hostile("Declined"),  # an error
        hostile("thread-1"),  # a thread name
        hostile("host"),  # a host
    ):
        assert printable(text) in out
    # a log record's line breaks (a traceback's) show as ⏎, on its one line
    assert r"⚠ WARNING app.pricing: stock\x1b]0;pwned\x07\x1b[2J ⏎ SEQ  forged\x9b31m" in out
    assert r"\x1b]0;pwned\x07" in out
    assert r"\r\nSEQ  forged" in out
    assert r"\u202eevil" in out
    assert r"→ th\x1b[2J, queued" in out  # a hand-off's kind
    assert "shop.café中文" in out  # printable Unicode is not escaped


def test_the_report_tracer_run_prints_is_escaped(repo: str) -> None:
    text = render_report(ReportOptions(repo, started_ns=0, db_flag=None, patterns=("shop",)))
    assert_terminal_safe(text)
    assert printable(f"shop{TITLE}.checkout{CLEAR}") in text


@pytest.mark.parametrize(
    "argv", [["ls", "--json"], ["show", PREFIX, "--json"], ["stats", "--json"]], ids=" ".join
)
def test_json_keeps_every_string_exact(repo: str, capsys, argv) -> None:
    _, out, _ = run(capsys, *argv, "--db", repo)
    found = strings(json.loads(out))
    assert f"shop{TITLE}.checkout{CLEAR}" in found or hostile("host") in found


def strings(document: object) -> set[str]:
    """Every string in a JSON document, keys too."""
    if isinstance(document, str):
        return {document}
    if isinstance(document, dict):
        return set(document) | {s for value in document.values() for s in strings(value)}
    if isinstance(document, list):
        return {s for value in document for s in strings(value)}
    return set()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("shop.checkout", "shop.checkout"),
        ("café 中文 ✓", "café 中文 ✓"),
        ("a\x1b]0;t\x07b", r"a\x1b]0;t\x07b"),
        ("line\r\nforged\ttab", r"line\r\nforged\ttab"),
        ("\x9b2J\x7f\x00", r"\x9b2J\x7f\x00"),
        ("\u202eevil\u2066x\u2028", r"\u202eevil\u2066x\u2028"),
        ("C:\\path", "C:\\path"),  # a backslash stays
        ("zero\u200dwidth joiner", "zero\u200dwidth joiner"),  # emoji sequences keep it
    ],
)
def test_printable_escapes_controls_and_keeps_unicode(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_the_lines_cmr_tail_prints_are_escaped(repo: str) -> None:
    """``cmr tail`` prints each sequence as ``fixed_line(sequence_cells(line))``."""
    store = open_store(repo, readonly=True)
    try:
        lines = store.list_sequences(10)
    finally:
        store.close()
    for line in lines:
        text = fixed_line(sequence_cells(line))
        assert_terminal_safe(text)
        assert text.endswith(printable(f"shop{TITLE}.checkout{CLEAR}"))


def test_an_error_message_quoting_what_was_given_is_escaped(repo: str, capsys) -> None:
    """The one line ``cmr: …`` of an error (a message may quote a sender, a server or an
    argument)."""
    code, out, err = run(capsys, "show", f"e5{CLEAR}{FORGED}", "--db", repo)
    assert code == 1
    assert_terminal_safe(out + err)
    assert err.count("\n") == 1
    assert printable(f"e5{CLEAR}{FORGED}") in err

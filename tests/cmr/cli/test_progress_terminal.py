"""Progress on a real terminal: `cmr import`, `prune`, `report` and `export`, each run as a
subprocess with its standard error on a pseudo-terminal, show their line
(counts, the time left) and erase it; with standard error a pipe, or INVOSEQ_PROGRESS=0, not one
byte differs from what they printed before progress existed.

INVOSEQ_PROGRESS_AFTER=0 and INVOSEQ_PROGRESS_EVERY=0 (the undocumented test knobs,
``tests.support.PROGRESS_NOW``) make the line appear at once and at every update, so nothing here
depends on the machine's speed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from cmr import bundle
from cmr.store import open_store
from tests.support import ERASE, PROGRESS_NOW, Ran, run_on_terminal, store_one_sequence

CALLS = 30_000  # 60,000 events: three bundle batches of 20,000 items at most


def run(
    tmp_path: Path, command: list[str], *, terminal: bool, env: dict[str, str] | None = None
) -> Ran:
    return run_on_terminal(tmp_path, command, terminal=terminal, env=env)


def cmr(*argv: str) -> list[str]:
    return [sys.executable, "-m", "cmr", *argv]


@pytest.fixture(name="big", scope="module")
def fixture_big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A repository of one sequence of CALLS calls, and its id."""
    path = tmp_path_factory.mktemp("progress") / "big.sqlite"
    return path, store_one_sequence(path, CALLS)


@pytest.fixture(name="bundle_file")
def fixture_bundle_file(big: tuple[Path, str], tmp_path: Path) -> Path:
    path, seq = big
    store = open_store(str(path), readonly=True)
    try:
        blob = bundle.write_bundle(store.load_sequence(bytes.fromhex(seq)))
    finally:
        store.close()
    file = tmp_path / "big.ivsq"
    file.write_bytes(blob)
    return file


def test_import_counts_batches_with_the_time_left(bundle_file: Path, tmp_path: Path) -> None:
    command = cmr("import", str(bundle_file), "--db", "copy.sqlite")
    shown = run(tmp_path, command, terminal=True, env=PROGRESS_NOW)
    again = run(tmp_path, cmr("import", str(bundle_file), "--db", "again.sqlite"), terminal=False)

    assert shown.code == 0
    batches = len(bundle.read_bundle(bundle_file.read_bytes()).entries)
    assert batches >= 3
    importing = [line for line in shown.drawn() if line.startswith("importing")]
    assert importing[0] == f"importing 0 / {batches} batches  0%"
    # every batch drawn (the ticker may draw one again), with the time left once one is done
    counts = [int(line.split()[1]) for line in importing]
    assert sorted(counts) == counts
    assert set(counts) == set(range(batches + 1))
    one = next(line for line in importing if line.startswith("importing 1 /"))
    assert one.startswith(f"importing 1 / {batches} batches  {100 // batches}%, about ")
    assert one.endswith(" s left")
    assert importing[-1] == f"importing {batches} / {batches} batches  100%"
    assert shown.drawn()[-1].startswith("finishing: the repository's last writes (")
    # erased before the command's own line: the terminal ends with the erase, stdout is as ever
    assert shown.stderr.endswith(ERASE)
    assert again.stderr == b""
    assert again.stdout == shown.stdout.replace(b"copy.sqlite", b"again.sqlite")
    assert shown.stdout.startswith(b"imported ")


def test_prune_counts_its_steps(big: tuple[Path, str], tmp_path: Path) -> None:
    for name in ("shown.sqlite", "piped.sqlite"):
        (tmp_path / name).write_bytes(big[0].read_bytes())
    shown = run(
        tmp_path,
        cmr("prune", "--older-than", "0s", "--db", "shown.sqlite"),
        terminal=True,
        env=PROGRESS_NOW,
    )
    piped = run(
        tmp_path, cmr("prune", "--older-than", "0s", "--db", "piped.sqlite"), terminal=False
    )

    assert shown.code == piped.code == 0
    pruning = [line for line in shown.drawn() if " / " in line]  # once its steps are known
    assert pruning[0].startswith("pruning 1 / 14 steps  7%, about ")
    assert pruning[-1] == "pruning 14 / 14 steps  100%"
    assert shown.stderr.endswith(ERASE)
    assert piped.stderr == b""
    assert shown.stdout.startswith(b"removed 1 sequence, ")
    # the same line, but for the cutoff's time, which differs between the two runs
    assert piped.stdout.split(b" from before ")[0] == shown.stdout.split(b" from before ")[0]


@pytest.mark.parametrize(
    ("command", "phases"),
    [
        (
            ["report", "{seq}", "-o", "page.html"],
            [
                "report 1/3: reading the sequence",
                f"report 2/3: building the page of {CALLS:,} calls",
                "report 3/3: writing page.html",
            ],
        ),
        (
            ["export", "{seq}", "--format", "chrome", "-o", "trace.json"],
            [
                "export 1/3: reading the sequence",
                f"export 2/3: converting {CALLS:,} calls to chrome",
                "export 3/3: writing trace.json",
            ],
        ),
    ],
)
def test_report_and_export_name_their_phases(
    big: tuple[Path, str], tmp_path: Path, command: list[str], phases: list[str]
) -> None:
    path, seq = big
    argv = cmr(*(part.format(seq=seq) for part in command), "--db", str(path))
    shown = run(tmp_path, argv, terminal=True, env=PROGRESS_NOW)
    written = (tmp_path / command[-1]).read_bytes()
    piped = run(tmp_path, argv, terminal=False, env=PROGRESS_NOW)

    assert shown.code == piped.code == 0
    drawn = [re.split(r" \(|  \d+%", line)[0] for line in shown.drawn()]  # less time, share
    assert [phase for phase in phases if phase in drawn] == phases
    # The long phase says how far it got, by its steps' shares, and the time left.
    converting = [line for line in shown.drawn() if line.startswith(phases[1])]
    assert converting[0] == f"{phases[1]}  0%"
    assert any(re.fullmatch(rf"{re.escape(phases[1])}  \d+%, about .+ left", c) for c in converting)
    said = f"cmr: wrote {command[-1]}: ".encode()
    assert shown.stderr.split(ERASE)[-1].startswith(said)  # erased before the command speaks
    assert piped.stderr.startswith(said)  # a pipe: only what the command always said
    assert ERASE not in piped.stderr
    assert len((tmp_path / command[-1]).read_bytes()) == len(written)


def test_export_to_the_terminal_erases_the_line_before_writing(
    big: tuple[Path, str], tmp_path: Path
) -> None:
    """Standard output may be the same terminal: the line is gone before the first byte."""
    path, seq = big
    argv = cmr("export", seq, "--format", "folded", "--db", str(path))
    shown = run(tmp_path, argv, terminal=True, env=PROGRESS_NOW)
    piped = run(tmp_path, argv, terminal=False)

    assert shown.code == 0
    assert shown.drawn()[-1].startswith(f"export 2/3: converting {CALLS:,} calls to folded")
    assert shown.stderr.endswith(ERASE)
    assert shown.stdout == piped.stdout
    assert piped.stderr == b""


def test_turned_off_on_a_terminal(bundle_file: Path, tmp_path: Path) -> None:
    off = {**PROGRESS_NOW, "INVOSEQ_PROGRESS": "0"}
    ran = run(tmp_path, cmr("import", str(bundle_file), "--db", "x.sqlite"), terminal=True, env=off)

    assert ran.code == 0
    assert ran.stderr == b""

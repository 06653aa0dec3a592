"""The end of `tracer run` on a real terminal: the events its final flush sends, counted with
the time left, then the report's phase, erased before the report; on a pipe, nothing of it."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support import ERASE, PROGRESS_NOW, run_on_terminal

TRACED = """\
def leaf(i):
    return i + 1


def work(n):
    return sum(leaf(i) for i in range(n))


print(work(20_000))
"""


def test_tracer_run_counts_what_it_sends_at_the_end(tmp_path: Path) -> None:
    (tmp_path / "busy.py").write_text(TRACED)
    argv = [sys.executable, "-m", "tracer", "run", "--include", "busy*", "busy.py"]
    shown = run_on_terminal(
        tmp_path, [*argv[:4], "--db", "shown.sqlite", *argv[4:]], terminal=True, env=PROGRESS_NOW
    )
    piped = run_on_terminal(
        tmp_path, [*argv[:4], "--db", "piped.sqlite", *argv[4:]], terminal=False, env=PROGRESS_NOW
    )

    assert shown.code == piped.code == 0
    assert shown.stdout == piped.stdout == b"200010000\n"
    drawn = shown.drawn()
    sending = [line for line in drawn if line.startswith("tracer: sending ")]
    assert sending[0].startswith("tracer: sending 0 / ")
    total = int(sending[0].split(" / ")[1].split(" ")[0].replace(",", ""))
    assert total > 0
    assert sending[-1] == f"tracer: sending {total:,} / {total:,} events  100%"
    assert drawn[-1].startswith("tracer: writing the report (")
    report = shown.stderr.split(ERASE)[-1]  # erased before the report
    assert b"1 sequence in this run" in report
    assert ERASE not in piped.stderr
    assert b"tracer: sending" not in piped.stderr
    assert b"1 sequence in this run" in piped.stderr

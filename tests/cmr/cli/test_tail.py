"""`cmr tail` as a user runs it: a process following the repository while a program completes
sequences, one line each as they complete, and Ctrl-C ending it with exit code 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.harness import LineReader
from tests.support import cmr_server, run_traced, write_script

pytestmark = pytest.mark.system

PATIENCE_S = 60

PROGRAM = """
import sys
import tracer

@tracer.traced
def checkout(n):
    if n == 2:
        raise ValueError("declined")

@tracer.traced
def poll():
    pass

for n in range(3):
    try:
        checkout(n)
    except ValueError:
        pass
    poll()
"""


@pytest.fixture(name="follow")
def fixture_follow(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=PATIENCE_S)


def _tail(db: Path, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cmr", "tail", "--db", str(db), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_tail_prints_each_sequence_as_it_completes_and_ends_on_ctrl_c(
    tmp_path: Path, follow: list[subprocess.Popen[bytes]], as_json: bool
) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "shop.py", PROGRAM)
    with cmr_server(db) as endpoint:
        run_traced(script, endpoint)  # before tail starts: not printed
        tail = _tail(db, "--root", "*.checkout", *(["--json"] if as_json else []))
        follow.append(tail)
        assert tail.stdout is not None
        assert tail.stderr is not None
        out_lines = LineReader(tail.stdout, "cmr tail")
        if not as_json:
            assert out_lines.line(PATIENCE_S).split()[:2] == ["SEQ", "START"]
        else:  # stdout is JSON lines only: tail says on stderr that it follows
            said = LineReader(tail.stderr, "cmr tail's stderr").line(PATIENCE_S)
            assert said == "cmr: following; Ctrl-C ends it"
        run_traced(script, endpoint)
        lines = [out_lines.line(PATIENCE_S) for _ in range(3)]
        tail.send_signal(signal.SIGINT)
        out, err = tail.communicate(timeout=PATIENCE_S)
        out_lines.close()

    assert (tail.returncode, out, err) == (0, b"", b"")
    if as_json:
        docs = [json.loads(line) for line in lines]
        assert [d["root"] for d in docs] == ["__main__.checkout"] * 3
        assert [d["error"] for d in docs] == [None, None, "ValueError"]
    else:
        assert [line.split()[-1] for line in lines] == ["__main__.checkout"] * 3
        assert [line.split()[5] for line in lines] == ["complete", "complete", "error"]

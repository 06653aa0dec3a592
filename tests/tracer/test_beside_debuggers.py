"""A traced program under a debugger or a sampling profiler that reads it from outside: pdb
(``python -m pdb``, and ``breakpoint()`` under ``tracer run --include``), debugpy (listening, and
driven through the Debug Adapter Protocol) and py-spy (``dump`` and ``record``). Each stops,
steps, evaluates and samples in the program's own functions, files and lines, as without the
tracer (on 3.11 a traced function runs an instrumented copy of its code: ``tracer/_core/
inject.py``; on 3.12+ ``sys.monitoring`` calls the tracer), the program ends with its own exit
status, and its traced calls are stored.

Every program is a real process in a session of its own, killed whole afterwards; every wait is
bounded (the debugger's commands come from a file, the DAP messages through a bounded socket).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes.stored import LEAF, sequences, tree
from tests.support import (
    cmr_server,
    own_session,
    read_line,
    run_program,
    say,
    shape,
    write_script,
)
from tests.tracer.dap_client import DapClient

pytestmark = pytest.mark.system

PATIENCE_S = 60.0

#: ``python prog.py traced|plain [debugpy|debugpy-wait|block]``: the same lines either way, the
#: functions decorated only when traced.
PROGRAM = """\
import sys

traced = (lambda f: f) if sys.argv[1] == "plain" else __import__("tracer").traced


@traced
def leaf(x):
    y = x * 2
    return y + 1


@traced
def work(n):
    total = 0
    for i in range(n):
        total += leaf(i)
    return total


def main():
    result = work(3)
    print("result", result, flush=True)
    return 3


@traced
def outer():
    return inner()


@traced
def inner():
    print("ready", flush=True)
    return sys.stdin.readline()


if __name__ == "__main__":
    if sys.argv[2:3] == ["block"]:
        outer()
    if sys.argv[2:3] in (["debugpy"], ["debugpy-wait"]):
        import debugpy

        print("port", debugpy.listen(("127.0.0.1", 0))[1], flush=True)
        if sys.argv[2] == "debugpy-wait":
            debugpy.wait_for_client()
    sys.exit(main())
"""


def line_of(source: str) -> int:
    """The number of the line of PROGRAM that is ``source``, indentation aside."""
    [number] = [n for n, line in enumerate(PROGRAM.splitlines(), 1) if line.strip() == source]
    return number


LEAF_LINE, CALL_LINE = line_of("y = x * 2"), line_of("total += leaf(i)")
MAIN_LINE = line_of("result = work(3)")
INNER_LINE, OUTER_LINE = line_of("return sys.stdin.readline()"), line_of("return inner()")
BLOCK_LINE, EXIT_LINE = line_of("outer()"), line_of("sys.exit(main())")

#: The stored tree of ``main()``: one sequence, ``work`` calling ``leaf`` three times.
WORK = {"name": "__main__.work", "status": "ok", "children": [LEAF] * 3}

#: On 3.11 in pure Python the handlers the instrumented code calls are Python functions, which
#: a ``sys.settrace`` debugger traces: ``step`` enters them (docs/guide.md says so).
PURE_311 = sys.version_info < (3, 12) and os.environ.get("INVOSEQ_PURE", "").strip() == "1"


def environment(endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    if "INVOSEQ_PURE" in os.environ:  # the hot path under test stays the one asked for
        env["INVOSEQ_PURE"] = os.environ["INVOSEQ_PURE"]
    env.update(INVOSEQ_ENDPOINT=endpoint, INVOSEQ_SPOOL_DIR=os.environ["INVOSEQ_SPOOL_DIR"])
    env.update(NO_COLOR="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


def stored_trees(db: Path) -> list[dict[str, Any]]:
    return sorted((shape(tree(db, s["seq"])) for s in sequences(db)), key=repr)


def known_deviation(transcript: str) -> None:
    """On 3.11 in pure Python, the session stepped into the handlers: an expected failure
    (the rest of the test, the transcript's equality, is not checked)."""
    if PURE_311:
        assert "<invoseq handlers>" in transcript, transcript
        pytest.xfail("3.11, pure Python: a debugger's step enters the tracer's handlers")


# -- pdb ----------------------------------------------------------------------------------------

#: Break in main, then by function name in a traced function; step into traced calls and
#: through them, print their variables, look at the stack, continue to the breakpoint, clear it
#: and continue to the end: pdb reports the program's exit status and starts it again, where
#: ``q`` ends the session.
PDB_COMMANDS = [
    f"b {MAIN_LINE}",
    "c",
    "b leaf",
    "s",  # into work: --Call--
    "s",
    "where",
    "n",
    "n",
    "s",  # into leaf: --Call--
    "s",  # its first line
    "s",  # its second line
    "where",
    "p x, y",
    "c",  # to the breakpoint in leaf, at its second call
    "p x",
    "cl 2",
    "c",
    "q",
]


def lines(transcript: str) -> list[str]:
    """The transcript's lines, each ``(Pdb)`` prompt on a line of its own."""
    return transcript.replace("(Pdb) ", "(Pdb)\n").splitlines()


#: A frame as pdb prints it, in ``where`` and where it stops: ``> path(line)function()``.
FRAME = re.compile(r"^[ >] (.+)\(\d+\)[^()]*\(\)")


def frame_lines(transcript: str) -> list[str]:
    """The frames pdb printed: ``path(line)function()``."""
    return [line[2:] for line in lines(transcript) if FRAME.match(line)]


def test_pdb_stops_steps_and_prints_in_traced_functions_as_untraced(tmp_path: Path) -> None:
    """``python -m pdb``, driven by PDB_COMMANDS, prints the same session with the functions
    traced as without; the program's exit status is its own and its calls are stored."""
    script = write_script(tmp_path / "prog.py", PROGRAM)
    commands = tmp_path / "commands"
    commands.write_text("\n".join(PDB_COMMANDS) + "\n")
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        transcripts = []
        for mode in ("plain", "traced"):
            with commands.open() as stdin:
                result = run_program(
                    [sys.executable, "-m", "pdb", str(script), mode],
                    stdin=stdin,
                    env=environment(endpoint),
                    cwd=tmp_path,
                    timeout_s=PATIENCE_S,
                )
            assert result.returncode == 0, result.stderr
            transcripts.append(result.stdout)
        plain, traced = transcripts
        assert "The program exited via sys.exit(). Exit status: 3" in traced
        assert traced.count("result 9\n") == 1
        assert stored_trees(tmp_path / "cmr.sqlite") == [WORK]
    known_deviation(traced)
    assert traced == plain
    # What the session did, as pdb printed it (the same both ways, as just seen):
    frames = frame_lines(traced)
    assert f"{script}({LEAF_LINE})leaf()" in frames
    assert not [f for f in frames if "/tracer/" in f or "invoseq" in f], frames
    assert "(Pdb) (0, 0)\n" in traced  # p x, y in the first call, after stepping
    assert f"({LEAF_LINE})leaf()\n-> y = x * 2\n(Pdb) 1\n" in traced  # the breakpoint


#: The same program with ``breakpoint()`` in a traced function of a module that ``tracer run
#: --include`` traces in place; run by ``main.py``, which exits with main()'s status.
MODULE = PROGRAM.replace("    total = 0\n", "    breakpoint()\n    total = 0\n", 1).replace(
    'traced = (lambda f: f) if sys.argv[1] == "plain" else __import__("tracer").traced',
    "traced = lambda f: f  # tracer run --include traces this module",
)
MAIN = "import sys, shop\nsys.exit(shop.main())\n"
BREAKPOINT_COMMANDS = ["where", "n", "n", "s", "s", "s", "where", "p x, y", "c"]


def program_frames(transcript: str, folder: Path) -> list[str]:
    """The transcript's lines without the frames below the program's own (``runpy``'s under
    ``python``, ``tracer run``'s under it) and the source lines pdb printed under them."""
    kept: list[str] = []
    skipping = False
    for line in lines(transcript):
        frame = FRAME.match(line)
        if frame:
            skipping = not frame.group(1).startswith(str(folder))
        elif not line.startswith("-> "):
            skipping = False
        if not skipping:
            kept.append(line)
    return kept


#: Where ``breakpoint()`` stops. 3.13's pdb stops at the call's own line, where no
#: ``sys.monitoring`` tool has events in the function's code; where one has (the tracer's, in a
#: traced function), it stops at the next line, as 3.11 and 3.12 always do.
STOPS_AT_THE_CALL = sys.version_info >= (3, 13)


def stops(transcript: list[str]) -> list[list[str]]:
    """The transcript cut at each prompt: what pdb printed before it, one list per command."""
    blocks: list[list[str]] = [[]]
    for line in transcript:
        if line == "(Pdb)":
            blocks.append([])
        else:
            blocks[-1].append(line)
    return blocks


def test_breakpoint_in_a_function_traced_by_tracer_run_include(tmp_path: Path) -> None:
    """``breakpoint()`` in ``work``, a function of a module ``tracer run --include`` traces in
    place; its steps and stack are the program's, as under ``python`` (whose stack below the
    program is ``runpy``'s where ``tracer run``'s is its own); it exits with its own status."""
    write_script(tmp_path / "shop.py", MODULE)
    write_script(tmp_path / "main.py", MAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    if "INVOSEQ_PURE" in os.environ:
        env["INVOSEQ_PURE"] = os.environ["INVOSEQ_PURE"]
    env.update(
        INVOSEQ_DB=str(tmp_path / "cmr.sqlite"),
        INVOSEQ_SPOOL_DIR=str(tmp_path / "spool"),
        NO_COLOR="1",
    )
    runs = []
    for traced in (False, True):
        prefix = ["-m", "tracer", "run", "--no-report", "--include", "shop"] if traced else []
        # Under python on 3.13, one `n` first, to the line the traced program stops at.
        first = ["n"] if STOPS_AT_THE_CALL and not traced else []
        commands = tmp_path / "commands"
        commands.write_text("\n".join(first + BREAKPOINT_COMMANDS) + "\n")
        with commands.open() as stdin:
            result = run_program(
                [sys.executable, *prefix, "main.py"],
                stdin=stdin,
                env=env,
                cwd=tmp_path,
                timeout_s=PATIENCE_S,
            )
        runs.append((result.returncode, result.stdout, result.stderr))
    (plain_code, plain_out, _), (code, traced_out, err) = runs
    assert (code, plain_code) == (3, 3), err
    work = {
        "name": "shop.work",
        "status": "ok",
        "children": [{"name": "shop.leaf", "status": "ok"}] * 3,
    }
    [summary] = sequences(tmp_path / "cmr.sqlite")
    assert shape(tree(tmp_path / "cmr.sqlite", summary["seq"])) == {
        "name": "shop.main",  # every function of the module is traced
        "status": "ok",
        "children": [work],
    }
    known_deviation(traced_out)
    plain, traced_stops = (stops(program_frames(out, tmp_path)) for out in (plain_out, traced_out))
    transcript = [line for block in traced_stops for line in block]
    shop = tmp_path / "shop.py"
    at_call = [f"> {shop}({line_of('total = 0')})work()", "-> breakpoint()"]
    next_line = [f"> {shop}({line_of('total = 0') + 1})work()", "-> total = 0"]
    assert traced_stops[0] == next_line, err
    if STOPS_AT_THE_CALL:
        assert plain[0] == at_call
        plain = plain[1:]
    assert traced_stops == plain, err
    frames = frame_lines("\n".join(transcript))
    assert f"{shop}({LEAF_LINE})leaf()" in frames
    assert not [f for f in frames if "/tracer/" in f or "invoseq" in f], frames
    assert "(0, 0)" in transcript
    assert "result 9" in transcript


# -- debugpy ------------------------------------------------------------------------------------


@contextlib.contextmanager
def session(command: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    """The program in a session of its own, stdin and stdout piped; killed whole afterwards
    (debugpy's adapter is a process of its own)."""
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with own_session(command, timeout_s=PATIENCE_S, cwd=cwd, env=env, **pipes) as process:
        yield process


def test_a_traced_program_runs_to_its_end_with_debugpy_listening(tmp_path: Path) -> None:
    pytest.importorskip("debugpy")
    script = write_script(tmp_path / "prog.py", PROGRAM)
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        outcomes = []
        for mode in ("plain", "traced"):
            command = [sys.executable, "-Xfrozen_modules=off", str(script), mode, "debugpy"]
            result = run_program(command, env=environment(endpoint), timeout_s=PATIENCE_S)
            outcomes.append((result.returncode, re.sub(r"port \d+", "port", result.stdout)))
        assert outcomes[1] == outcomes[0] == (3, "port\nresult 9\n")
        assert stored_trees(tmp_path / "cmr.sqlite") == [WORK]


def test_a_dap_breakpoint_stops_in_a_traced_function(tmp_path: Path) -> None:
    """Set through the Debug Adapter Protocol before the program runs on: it stops at each of
    the three calls of ``leaf``, with the program's stack, and evaluates ``x`` there."""
    pytest.importorskip("debugpy")
    script = write_script(tmp_path / "prog.py", PROGRAM)
    command = [sys.executable, "-Xfrozen_modules=off", str(script), "traced", "debugpy-wait"]
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        with session(command, environment(endpoint), tmp_path) as program:
            port = int(read_line(program, PATIENCE_S).split()[1])
            client = DapClient(port, PATIENCE_S)
            try:
                client.request(
                    "initialize", clientID="test", adapterID="debugpy", pathFormat="path"
                )
                attached = client.send("attach", justMyCode=False)
                client.event("initialized")
                breakpoints = client.request(
                    "setBreakpoints",
                    source={"path": str(script)},
                    breakpoints=[{"line": LEAF_LINE}],
                )["body"]["breakpoints"]
                assert [b["verified"] for b in breakpoints] == [True]
                client.request("configurationDone")
                client.response(attached)
                stops = []
                for _ in range(3):
                    thread = client.event("stopped")["body"]["threadId"]
                    frames = client.request("stackTrace", threadId=thread)["body"]["stackFrames"]
                    value = client.request(
                        "evaluate", expression="x", frameId=frames[0]["id"], context="repl"
                    )["body"]["result"]
                    stack = [(f["name"], f["source"]["path"], f["line"]) for f in frames]
                    stops.append((value, stack))
                    client.request("continue", threadId=thread)
            finally:
                client.close()
            stdout, stderr = program.communicate(timeout=PATIENCE_S)
        assert (program.returncode, stdout) == (3, "result 9\n"), stderr
        path = str(script)
        stack = [("leaf", path, LEAF_LINE), ("work", path, CALL_LINE), ("main", path, MAIN_LINE)]
        assert stops == [(str(x), [*stack, ("<module>", path, EXIT_LINE)]) for x in range(3)]
        assert stored_trees(tmp_path / "cmr.sqlite") == [WORK]


# -- py-spy ---------------------------------------------------------------------------------------


def py_spy() -> str:
    found = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if found is None:
        pytest.skip("py-spy is not installed (pip install py-spy)")
    return found


def spy(*args: str) -> str:
    result = subprocess.run(
        [py_spy(), *args], capture_output=True, text=True, timeout=PATIENCE_S, check=False
    )
    if result.returncode != 0 and "ermission" in result.stderr + result.stdout:
        pytest.skip(f"py-spy cannot attach here (it needs ptrace): {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    return result.stdout


def dump_blocked(pid: int, innermost: str) -> str:
    """``py-spy dump`` of the process once its main thread's innermost frame ends in
    ``innermost`` (its blocking line: "ready" is printed a line before it, so a dump taken at
    once may find the thread still finishing the print), or the last dump after PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        dump = spy("dump", "--pid", str(pid), "--full-filenames")
        main_thread = dump.split('"MainThread"\n', 1)[-1].strip().splitlines()
        if (main_thread and main_thread[0].endswith(innermost)) or time.monotonic() > deadline:
            return dump


def test_py_spy_sees_the_programs_own_frames_in_traced_functions(tmp_path: Path) -> None:
    """``py-spy dump`` of the main thread blocked in ``inner`` (called by ``outer``, both
    traced): the program's frames, files and lines and nothing between them; ``py-spy record``
    of it (two seconds of samples, idle ones included) has the same stack."""
    script = write_script(tmp_path / "prog.py", PROGRAM)
    path = str(script)
    with cmr_server(tmp_path / "cmr.sqlite") as endpoint:
        command = [sys.executable, path, "traced", "block"]
        with session(command, environment(endpoint), tmp_path) as program:
            assert read_line(program, PATIENCE_S) == "ready\n"
            dump = dump_blocked(program.pid, f"{path}:{INNER_LINE})")
            record = tmp_path / "record.txt"
            spy(
                "record", "--pid", str(program.pid), "--duration", "2", "--nonblocking", "--idle",
                "--format", "raw", "--full-filenames", "--output", str(record),
            )  # fmt: skip
            say(program, "")
            stdout, stderr = program.communicate(timeout=PATIENCE_S)
            assert (program.returncode, stdout) == (3, "result 9\n"), stderr
    main_thread = dump.split('"MainThread"\n', 1)[1].split("\nThread ", 1)[0]
    expected = [
        f"inner ({path}:{INNER_LINE})",
        f"outer ({path}:{OUTER_LINE})",
        f"<module> ({path}:{BLOCK_LINE})",
    ]
    assert [line.strip() for line in main_thread.strip().splitlines()] == expected, dump
    # raw: one folded stack a line, outermost first, then the count of its samples
    stacks = [line.rsplit(" ", 1)[0] for line in record.read_text().splitlines()]
    assert any(s.endswith(";".join(reversed(expected))) for s in stacks), stacks
    assert stored_trees(tmp_path / "cmr.sqlite") == sorted(
        [WORK, {"name": "__main__.outer", "status": "ok", "children": [
            {"name": "__main__.inner", "status": "ok"}]}], key=repr
    )  # fmt: skip

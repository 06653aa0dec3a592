"""``tracer run`` end to end: real subprocesses, a real embedded ``cmr serve``, real SQLite.

Each test runs ``python -m tracer run`` on a small script in tmp_path with INVOSEQ_DB there, then
checks what a user sees: the program's own output and exit code (as with plain ``python``), the
report on stderr, and the trees ``cmr show`` gives afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cmr.store import open_store
from tests.support import cmr_json, cmr_server, shape, write_script

pytestmark = pytest.mark.system

SHOP = """
import sys

class Declined(Exception):
    pass

def handle(user):
    cart = load_cart(user)
    try:
        charge(cart)
    except Declined:
        return "declined"
    return "paid"

def load_cart(user):
    return [fetch_item(i) for i in range(2)]

def fetch_item(i):
    return i

def charge(cart):
    if len(sys.argv) > 1 and sys.argv[1] == "decline":
        raise Declined()

print("argv", sys.argv[1:])
print(handle("ada"))
print("path0", sys.path[0])
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 0)
"""

SHOP_TREE = {
    "name": "__main__.handle",
    "status": "ok",
    "children": [
        {
            "name": "__main__.load_cart",
            "status": "ok",
            "children": [{"name": "__main__.fetch_item", "status": "ok"}] * 2,
        },
        {"name": "__main__.charge", "status": "error", "error": "Declined"},
    ],
}


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_DB=str(tmp_path / "cmr.sqlite"), NO_COLOR="1", **extra)
    return env


def run(
    tmp_path: Path, *args: str, traced: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tracer", "run", *args] if traced else [sys.executable, *args]
    return subprocess.run(
        command,
        cwd=tmp_path,
        env=environment(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def sequences(tmp_path: Path) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = cmr_json(tmp_path / "cmr.sqlite", "ls")
    return listed


def tree(tmp_path: Path, seq: str) -> dict[str, Any]:
    shown: dict[str, Any] = cmr_json(tmp_path / "cmr.sqlite", "show", seq)
    return shown


def program_argv(tmp_path: Path, seq: str) -> tuple[str, ...]:
    """The command line the repository holds for the sequence's process."""
    store = open_store(str(tmp_path / "cmr.sqlite"))
    try:
        [process] = store.load_sequence(bytes.fromhex(seq)).processes.values()
        return process.argv
    finally:
        store.close()


def test_program_behaves_as_under_python_and_its_tree_is_stored(tmp_path: Path) -> None:
    write_script(tmp_path / "shop.py", SHOP)
    plain = run(tmp_path, "shop.py", "decline", "3", "--flag", traced=False)
    traced = run(tmp_path, "shop.py", "decline", "3", "--flag")
    assert plain.returncode == 3
    assert traced.returncode == 3, traced.stderr
    assert traced.stdout == plain.stdout
    assert "argv ['decline', '3', '--flag']\ndeclined\n" in traced.stdout
    assert f"path0 {tmp_path}\n" in traced.stdout
    assert "1 sequence in this run" in traced.stderr
    assert "__main__.handle" in traced.stderr
    [summary] = sequences(tmp_path)
    assert summary["root"] == "__main__.handle"
    assert summary["seq"][:12] in traced.stderr  # the hint: cmr show <prefix>
    assert f"cmr show {summary['seq'][:12]}" in traced.stderr
    assert shape(tree(tmp_path, summary["seq"])["root"]) == SHOP_TREE
    # The process is the program's, not the launcher's: what OTLP exports name the service by.
    assert program_argv(tmp_path, summary["seq"]) == ("shop.py", "decline", "3", "--flag")


def test_uncaught_exception_is_printed_like_python_and_still_reported(tmp_path: Path) -> None:
    write_script(
        tmp_path / "crash.py",
        """
        def explode():
            raise ValueError("boom")

        def main():
            explode()

        main()
        """,
    )
    plain = run(tmp_path, "crash.py", traced=False)
    traced = run(tmp_path, "crash.py")
    assert plain.returncode == traced.returncode == 1
    traceback = traced.stderr.split("\ntracer: ")[0]
    assert traceback.strip() == plain.stderr.strip()
    assert "tracer/" not in traceback
    [summary] = sequences(tmp_path)
    assert shape(tree(tmp_path, summary["seq"])["root"]) == {
        "name": "__main__.main",
        "status": "error",
        "error": "ValueError",
        "children": [{"name": "__main__.explode", "status": "error", "error": "ValueError"}],
    }


@pytest.mark.parametrize(
    ("code", "status", "stderr"),
    [("None", 0, ""), ("0", 0, ""), ("7", 7, ""), ("'bye'", 1, "bye\n")],
)
def test_sys_exit_codes_are_the_programs(
    tmp_path: Path, code: str, status: int, stderr: str
) -> None:
    write_script(tmp_path / "leave.py", f"import sys\nsys.exit({code})\n")
    result = run(tmp_path, "--no-report", "leave.py")
    assert result.returncode == status
    assert result.stderr == stderr
    assert result.stdout == ""


def test_a_script_whose_name_is_no_module_name_is_traced_too(tmp_path: Path) -> None:
    write_script(tmp_path / "my report.v2.py", "def build():\n    return 1\n\nbuild()\n")
    result = run(tmp_path, "--no-report", "my report.v2.py")
    assert result.returncode == 0, result.stderr
    assert [s["root"] for s in sequences(tmp_path)] == ["__main__.build"]


def test_module_mode_traces_the_package_and_passes_arguments(tmp_path: Path) -> None:
    package = tmp_path / "tool"
    package.mkdir()
    (package / "__init__.py").write_text("")
    write_script(package / "helpers.py", "def shout(word):\n    return word.upper()\n")
    write_script(
        package / "__main__.py",
        """
        import sys
        from tool.helpers import shout

        def main(words):
            return [shout(w) for w in words]

        print(main(sys.argv[1:]), sys.argv[0].endswith("__main__.py"))
        """,
    )
    plain = run(tmp_path, "-m", "tool", "a", "-b", traced=False)
    traced = run(tmp_path, "-m", "tool", "a", "-b")
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout == "['A', '-B'] True\n"
    [summary] = sequences(tmp_path)
    assert shape(tree(tmp_path, summary["seq"])["root"]) == {
        "name": "__main__.main",
        "status": "ok",
        "children": [{"name": "tool.helpers.shout", "status": "ok"}] * 2,
    }
    assert program_argv(tmp_path, summary["seq"]) == ("-m", "tool", "a", "-b")


def test_include_chooses_the_modules_and_the_script_only_when_it_matches(tmp_path: Path) -> None:
    write_script(tmp_path / "helpers.py", "def helper():\n    return 1\n")
    write_script(
        tmp_path / "app.py",
        "import helpers\n\ndef go():\n    return helpers.helper()\n\ngo()\n",
    )
    run(tmp_path, "--no-report", "app.py")  # default: the script only
    run(tmp_path, "--no-report", "--include", "helpers", "app.py")
    run(tmp_path, "--no-report", "--include", "helpers,app", "app.py")
    roots = [s["root"] for s in reversed(sequences(tmp_path))]
    assert roots == ["__main__.go", "helpers.helper", "__main__.go"]
    last = tree(tmp_path, sequences(tmp_path)[0]["seq"])["root"]
    assert shape(last) == {
        "name": "__main__.go",
        "status": "ok",
        "children": [{"name": "helpers.helper", "status": "ok"}],
    }


def test_threads_and_atexit_handlers_finish_before_the_report(tmp_path: Path) -> None:
    write_script(
        tmp_path / "worker.py",
        """
        import atexit
        import threading

        def work():
            return step()

        def step():
            return 1

        atexit.register(lambda: print("atexit handler", flush=True))
        threading.Thread(target=work).start()  # never joined: the interpreter waits for it
        """,
    )
    result = run(tmp_path, "worker.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "atexit handler\n"
    assert "__main__.work" in result.stderr
    [summary] = sequences(tmp_path)
    assert summary["status"] == "complete"
    assert summary["invocations"] == 2


def test_child_processes_send_to_the_same_embedded_repository(tmp_path: Path) -> None:
    write_script(
        tmp_path / "child.py",
        """
        import tracer

        @tracer.traced
        def in_child():
            return 1

        in_child()
        """,
    )
    write_script(
        tmp_path / "parent.py",
        """
        import os
        import subprocess
        import sys

        def spawn():
            subprocess.run([sys.executable, "child.py"], check=True)

        print(os.environ["INVOSEQ_ENDPOINT"].startswith("ipc://"))
        spawn()
        """,
    )
    result = run(tmp_path, "parent.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "True\n"
    # The child continues the parent's sequence (TRACEPARENT), sending to the same repository.
    [summary] = sequences(tmp_path)
    root = tree(tmp_path, summary["seq"])["root"]
    assert root["name"] == "__main__.spawn"
    [child] = root["children"]
    assert (child["name"], child["handoff"]["kind"]) == ("__main__.in_child", "process")
    assert child["process"]["pid"] != root["process"]["pid"]


def test_report_lists_only_this_runs_sequences_slowest_first(tmp_path: Path) -> None:
    write_script(
        tmp_path / "many.py",
        """
        import time

        def request(ms):
            time.sleep(ms / 1000)

        for ms in (1, 30, 2, 3, 4, 20, 5):
            request(ms)
        """,
    )
    first = run(tmp_path, "many.py")
    second = run(tmp_path, "many.py")
    assert first.returncode == second.returncode == 0
    everything = sequences(tmp_path)  # newest first
    assert len(everything) == 14
    ours = sorted(everything[:7], key=lambda s: -s["duration_ns"])
    assert "7 sequences in this run; the 5 slowest:" in second.stderr
    prefixes = {s["seq"][:12] for s in everything}
    first_words = [line.split(" ", 1)[0] for line in second.stderr.splitlines()]
    listed = [word for word in first_words if word in prefixes]  # the table's SEQ column
    assert listed == [s["seq"][:12] for s in ours[:5]]


def test_an_endpoint_means_no_embedded_repository_and_no_report(tmp_path: Path) -> None:
    write_script(tmp_path / "app.py", "def go():\n    return 1\n\ngo()\n")
    elsewhere = tmp_path / "elsewhere.sqlite"
    with cmr_server(elsewhere) as endpoint:
        result = run(tmp_path, "--endpoint", endpoint, "app.py")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert not (tmp_path / "cmr.sqlite").exists()
    assert [s["root"] for s in cmr_json(elsewhere, "ls")] == ["__main__.go"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to run"),
        (("missing.py",), "can't open file 'missing.py'"),
        (("-m",), "-m needs a module name"),
        (("-m", "no_such_module"), "No module named no_such_module"),
        (("--include", "a/b.py", "x.py"), "looks like a file"),
        (("--bogus", "x.py"), "unrecognized arguments: --bogus"),
        (("--endpoint", "tcp://127.0.0.1:1", "--db", "x.sqlite", "x.py"), "--db is for"),
        (("--endpoint", "nonsense", "x.py"), "expected a ZeroMQ endpoint"),
    ],
)
def test_usage_errors_are_one_line_and_exit_1(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    write_script(tmp_path / "x.py", "print('ran')\n")
    result = run(tmp_path, *args)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert message in result.stderr


def test_repository_that_cannot_start_stops_the_run_before_the_program(tmp_path: Path) -> None:
    write_script(tmp_path / "x.py", "print('ran')\n")
    result = run(tmp_path, "--db", str(tmp_path), "x.py")  # a directory is no database
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "repository" in result.stderr


def test_help_explains_the_command_with_examples(tmp_path: Path) -> None:
    top = subprocess.run(
        [sys.executable, "-m", "tracer", "--help"], capture_output=True, text=True, check=False
    )
    sub = run(tmp_path, "--help")
    assert top.returncode == sub.returncode == 0
    assert "tracer run examples/shop.py" in top.stdout
    for needle in ("--include PATTERN", "-m MODULE", "--endpoint", "--db", "--no-report"):
        assert needle in sub.stdout
    assert "shop.*" in sub.stdout
    assert "site-packages" in sub.stdout

"""A real program we did not write, fanning out to a process pool, traced with no code change.

`python -m compileall -j 2` compiles files in a ProcessPoolExecutor (forkserver start method).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support import cmr_json, run_python

MESSAGE = re.compile(r"(?:Listing|Compiling) '[^']+'\.\.\.")


def messages(output: str) -> list[str]:
    return sorted(MESSAGE.findall(output))


def compileall(tmp_path: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    result = run_python(tmp_path, *prefix, "-m", "compileall", "-j", "2", "src")
    assert result.returncode == 0, result.stderr
    for cache in (tmp_path / "src").rglob("__pycache__"):
        for compiled in cache.iterdir():
            compiled.unlink()
    return result


def test_compileall_with_a_process_pool_is_one_sequence(tmp_path: Path) -> None:
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    for n in range(6):
        (package / f"m{n}.py").write_text(f"def f{n}():\n    return {n}\n")
    plain = compileall(tmp_path)
    traced = compileall(tmp_path, "-m", "tracer", "run", "--include", "compileall")
    # Two workers print into one pipe as they go: the order of their messages, and even where a
    # line breaks between them, varies between any two runs, traced or not. The messages do not.
    assert messages(traced.stdout) == messages(plain.stdout)
    assert len(messages(plain.stdout)) == 8  # two directories listed, six files compiled
    [summary] = cmr_json(tmp_path / "cmr.sqlite", "ls")
    assert summary["status"] == "complete"
    root = cmr_json(tmp_path / "cmr.sqlite", "show", summary["seq"])["root"]
    assert root["name"] == "__main__.main"
    [compile_dir] = root["children"]
    tasks = [c for c in compile_dir["children"] if c["handoff"] is not None]
    assert len(tasks) == 6
    assert {t["name"].rsplit(".", 1)[1] for t in tasks} == {"compile_file"}
    assert {t["handoff"]["kind"] for t in tasks} == {"process"}
    workers = {t["process"]["pid"] for t in tasks}
    assert root["process"]["pid"] not in workers
    # The program and the workers that ran its tasks: which of the two workers gets each task is
    # the pool's choice (one may take all six), so count the ones that did.
    assert 1 <= len(workers) <= 2
    assert summary["processes"] == 1 + len(workers)
